import { EMBED_MAX_DIMENSIONS, encodeVector } from '@app/common/protocol/embeddings';
import { runtimeVectors } from './runtime-vectors';

void describe('runtimeVectors', () => {
  const two = { input: ['a', 'b'] };

  void it('rounds each value to float32, the runtime’s own values bit for bit', () => {
    // Go writes a float32 as its shortest decimal (0.1), Python as the double it widened it to.
    const [fromGo, fromPython] = runtimeVectors(
      [
        [0.1, -0.2],
        [0.10000000149011612, -0.20000000298023224],
      ],
      two,
    );
    expect(fromGo).toBeInstanceOf(Float32Array);
    expect(Array.from(fromGo)).toEqual([Math.fround(0.1), Math.fround(-0.2)]);
    expect(fromPython).toEqual(fromGo);
  });

  void it('reads a base64 vector (OpenAI’s format, asked by the OpenAI-compatible backend) bit for bit', () => {
    const bits = [0x3dcccccd, 0x80000000, 0x00000001, 0x7f7fffff];
    const bytes = Buffer.alloc(bits.length * 4);
    bits.forEach((b, i) => bytes.writeUInt32LE(b, i * 4));
    const [vector, other] = runtimeVectors([bytes.toString('base64'), encodeVector([0.5, -1.25, 0, 1])], two);
    expect(Array.from(new Uint32Array(vector.buffer, vector.byteOffset, vector.length))).toEqual(bits);
    expect(Array.from(other)).toEqual([0.5, -1.25, 0, 1]);
  });

  void it('refuses a base64 vector as it refuses bad floats: partial float32s, non-finite values, not base64', () => {
    const bad = (embedding: string, message: RegExp) =>
      expect(() => runtimeVectors([encodeVector([1, 2]), embedding], two)).toThrow(
        expect.objectContaining({ code: 'upstream_bad_response', message: expect.stringMatching(message) }),
      );
    // Six bytes: one float32 and a half.
    bad(Buffer.from([0, 0, 0x80, 0x3f, 0, 0]).toString('base64'), /vector 1 is 6 bytes, not whole float32 values/);
    bad(Buffer.from([0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 1]).toString('base64'), /9 bytes/);
    for (const nonFinite of [0x7fc00000, 0x7f800000, 0xff800000]) {
      const bytes = Buffer.alloc(8);
      bytes.writeFloatLE(1, 0);
      bytes.writeUInt32LE(nonFinite, 4);
      bad(bytes.toString('base64'), /vector 1 has a value that is not finite \(at 1\)/);
    }
    // Buffer would skip the characters outside the alphabet and shift what follows.
    bad('AACAP!AAAEA=', /vector 1 is not base64/);
    bad('AACAPw', /vector 1 is not base64/);
    bad('AACAPwAAAEA=\n', /vector 1 is not base64/);
    bad('', /vectors of 2 dimensions|vector 1 has 0 dimensions/);
  });

  void it('refuses what the protocol cannot carry as upstream_bad_response', () => {
    const bad = (raw: unknown[], message: RegExp) =>
      expect(() => runtimeVectors(raw, two)).toThrow(
        expect.objectContaining({ code: 'upstream_bad_response', message: expect.stringMatching(message) }),
      );
    bad([[1, 2]], /1 vectors for 2 inputs/);
    bad([[1, 2], [1, 2], [3]], /3 vectors for 2 inputs/);
    bad([[1, 2], 'x'], /vector 1 is not base64/);
    bad([[1, 2], { values: [1, 2] }], /vector 1 is neither base64 nor an array/);
    bad(
      [
        [1, '2'],
        [1, 2],
      ],
      /not a number \(at 1\)/,
    );
    bad(
      [
        [1, 2],
        [1e39, 2],
      ],
      /beyond float32's range \(at 0\)/,
    );
    bad(
      [
        [1, 2],
        [1, 2, 3],
      ],
      /vector 1 has 3 dimensions, vector 0 has 2/,
    );
    bad([[], []], /vectors of 0 dimensions/);
    const huge = new Array<number>(EMBED_MAX_DIMENSIONS + 1).fill(0);
    bad([huge, huge], /16385 dimensions/);
  });

  void it('checks the vectors’ length against the dimensions asked for', () => {
    const asked = { input: ['a'], dimensions: 3 };
    expect(runtimeVectors([[1, 2, 3]], asked)[0]).toHaveLength(3);
    // Ollama answers the whole vector when asked for more than the model has.
    expect(() => runtimeVectors([[1, 2]], asked)).toThrow(
      expect.objectContaining({ code: 'upstream_bad_request', message: expect.stringMatching(/2 dimensions, fewer/) }),
    );
    // A runtime that ignored dimensions.
    expect(() => runtimeVectors([[1, 2, 3, 4]], asked)).toThrow(
      expect.objectContaining({ code: 'upstream_bad_response', message: expect.stringMatching(/ignored dimensions/) }),
    );
  });
});
