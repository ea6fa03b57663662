import { createHash } from 'node:crypto';

/**
 * The opaque reference to a device that an organization's task records carry: stable for one device
 * and one organization (two tasks of an organization served by the same device have the same one),
 * different for another organization (two organizations cannot tell that one device served them
 * both), and no device id. SHA-256 of both ids, which are random UUIDs no organization is shown for a
 * network device, truncated to 128 bits and written `dev_<32 hex digits>`.
 */
export function deviceRef(orgId: string, deviceId: string): string {
  return `dev_${createHash('sha256').update(`switchyard-device-ref\0${orgId}\0${deviceId}`).digest('hex').slice(0, 32)}`;
}
