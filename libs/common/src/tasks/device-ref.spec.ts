import { deviceRef } from './device-ref';

const device = 'f15a0390-587d-4b1c-bba6-88264468c2eb';
const orgA = '3b0c1e52-7a51-4a8e-9d1e-2f0a5b6c7d8e';
const orgB = '9c2d4e61-1b2a-4c3d-8e4f-5a6b7c8d9e0f';

describe('deviceRef', () => {
  it('is stable for one device and one organization, and another for another organization or device', () => {
    expect(deviceRef(orgA, device)).toBe(deviceRef(orgA, device));
    expect(deviceRef(orgA, device)).not.toBe(deviceRef(orgB, device));
    expect(deviceRef(orgA, device)).not.toBe(deviceRef(orgA, '0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0'));
  });

  it('is dev_ and 32 hex digits, and holds neither id', () => {
    const ref = deviceRef(orgA, device);
    expect(ref).toMatch(/^dev_[0-9a-f]{32}$/);
    for (const id of [device, orgA]) {
      expect(ref).not.toContain(id.replace(/-/g, '').slice(0, 8));
    }
  });
});
