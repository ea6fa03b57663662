import { Decoder, Encoder, PacketType } from 'socket.io-parser';

const BINARY_TYPES = new Set([String(PacketType.BINARY_EVENT), String(PacketType.BINARY_ACK)]);

/**
 * Whether an engine.io message is (part of) a binary socket.io packet: a binary frame, or the text
 * header of a BINARY_EVENT / BINARY_ACK (its first character is the packet type) announcing them.
 */
export function isBinaryPacket(data: unknown): boolean {
  return typeof data !== 'string' || BINARY_TYPES.has(data.charAt(0));
}

/** A device sent a binary packet: the device protocol is JSON. */
export class BinaryPacketRefused extends Error {
  constructor() {
    super('binary packets are refused: the device protocol is JSON');
  }
}

/**
 * socket.io's decoder, refusing binary packets before it reassembles anything. The stock decoder
 * collects a packet's binary attachments (up to ten frames of DEVICE_MAX_EVENT_BYTES each) and then
 * delivers the packet: that went around both the event size and the byte budget (which counts text
 * frames), 488 MB in 10 s from one device. Here the first binary packet throws, and socket.io closes
 * the connection (Client.ondata); anything that follows on it is dropped unread. The gateway sees the
 * packet first on a connected device's socket and counts it as a misdeed (DeviceStrikes.out); this
 * covers the moments before and around that, such as a handshake still being checked.
 */
class JsonOnlyDecoder extends Decoder {
  private refused = false;

  override add(chunk: unknown): void {
    if (this.refused) {
      return;
    }
    if (isBinaryPacket(chunk)) {
      this.refused = true;
      throw new BinaryPacketRefused();
    }
    super.add(chunk);
  }
}

/** The `parser` option of the dispatcher's socket.io server: socket.io's own, minus binary packets. */
export const jsonOnlyParser = { Encoder, Decoder: JsonOnlyDecoder };
