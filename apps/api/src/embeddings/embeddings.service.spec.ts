import { AppError, encodeVector } from '@app/common';
import { joinBatches, sharedSlot } from './embeddings.service';

describe('EmbeddingsService, its pieces', () => {
  it('joins the batches in order, and refuses vectors of different lengths from different devices', () => {
    const v = (n: number, x: number) => encodeVector(new Array<number>(n).fill(x));
    expect(
      joinBatches([
        { vectors: [v(4, 1), v(4, 2)], promptTokens: 2 },
        { vectors: [v(4, 3)], promptTokens: null },
      ]),
    ).toEqual([v(4, 1), v(4, 2), v(4, 3)]);
    const mixed = () =>
      joinBatches([
        { vectors: [v(4, 1)], promptTokens: 1 },
        { vectors: [v(8, 1)], promptTokens: 1 },
      ]);
    expect(mixed).toThrow(AppError);
    expect(mixed).toThrow(/different lengths/);
  });

  it("a shared slot is released once, when every batch's part has been, however often each part is released", () => {
    let released = 0;
    const part = sharedSlot({ release: () => released++ }, 3);
    const parts = [part(), part(), part()];
    parts[0].release();
    parts[0].release();
    parts[1].release();
    expect(released).toBe(0);
    parts[2].release();
    parts[2].release();
    expect(released).toBe(1);
  });
});
