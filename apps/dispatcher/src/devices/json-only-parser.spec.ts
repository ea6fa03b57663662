import { Encoder, PacketType } from 'socket.io-parser';
import type { Packet } from 'socket.io-parser';
import { BinaryPacketRefused, isBinaryPacket, jsonOnlyParser } from './json-only-parser';

describe('the JSON-only socket.io parser', () => {
  const encode = (packet: Packet): unknown[] => new Encoder().encode(packet);

  it('decodes text packets as socket.io does', () => {
    const decoder = new jsonOnlyParser.Decoder();
    const decoded: Packet[] = [];
    decoder.on('decoded', (packet: Packet) => decoded.push(packet));
    const [text] = encode({ type: PacketType.EVENT, nsp: '/devices', data: ['announce', { ok: 1 }], id: 3 });
    decoder.add(text);
    expect(decoded).toEqual([{ type: PacketType.EVENT, nsp: '/devices', data: ['announce', { ok: 1 }], id: 3 }]);
  });

  it('refuses an event with a binary attachment at its header, before any attachment, and then reads nothing', () => {
    const decoder = new jsonOnlyParser.Decoder();
    const decoded: Packet[] = [];
    decoder.on('decoded', (packet: Packet) => decoded.push(packet));
    const frames = encode({ type: PacketType.EVENT, nsp: '/devices', data: ['task:delta', Buffer.alloc(1024)] });
    expect(frames).toHaveLength(2);
    expect(typeof frames[0]).toBe('string');
    expect(() => decoder.add(frames[0])).toThrow(BinaryPacketRefused);
    decoder.add(frames[1]);
    decoder.add(encode({ type: PacketType.EVENT, nsp: '/devices', data: ['announce', {}] })[0]);
    expect(decoded).toEqual([]);
  });

  it('refuses binary acks and bare binary frames', () => {
    const [ack] = encode({ type: PacketType.ACK, nsp: '/devices', data: [Buffer.alloc(4)], id: 1 });
    expect(() => new jsonOnlyParser.Decoder().add(ack)).toThrow(BinaryPacketRefused);
    expect(() => new jsonOnlyParser.Decoder().add(Buffer.from('2["announce"]'))).toThrow(BinaryPacketRefused);
  });

  it('tells binary engine.io messages apart', () => {
    expect(isBinaryPacket('2["task:delta",{}]')).toBe(false);
    expect(isBinaryPacket('51-["task:delta",{"_placeholder":true,"num":0}]')).toBe(true);
    expect(isBinaryPacket('61-[{"_placeholder":true,"num":0}]')).toBe(true);
    expect(isBinaryPacket(Buffer.alloc(3))).toBe(true);
    expect(isBinaryPacket(new ArrayBuffer(3))).toBe(true);
  });
});
