import type { ChoiceDelta, FinishReason } from '@app/common/protocol/chat';
import type { BackendResult } from '../backend';

/**
 * `include_stop_str_in_output` for runtimes that cannot do it themselves (Ollama has no such option,
 * llama.cpp's server neither): the stop strings are not sent to the runtime; its output is watched
 * here instead, cut right after the first stop string of each choice, stop string included, as vLLM
 * does. Content that may be the start of a stop string is held back until the next piece tells.
 *
 * When every choice has met a stop string the runtime is left at once (its request closed), so it
 * never reports its token counts: such an answer has no usage.
 */
export class StopTextFilter {
  /** A stop string split across pieces is seen when this much of the previous text is kept. */
  private readonly hold: number;
  private readonly held = new Map<number, string>();
  private readonly stopped = new Set<number>();

  constructor(
    private readonly stops: readonly string[],
    private readonly n: number,
  ) {
    this.hold = Math.max(0, ...stops.map((s) => s.length)) - 1;
  }

  /** Whether every choice has met a stop string: nothing more is wanted from the runtime. */
  get done(): boolean {
    return this.stopped.size >= this.n;
  }

  /** The deltas to emit for these: content up to and including a stop string, less what is held back. */
  filter(deltas: ChoiceDelta[]): ChoiceDelta[] {
    const out: ChoiceDelta[] = [];
    for (const delta of deltas) {
      if (this.stopped.has(delta.index)) {
        continue;
      }
      if (delta.content === undefined) {
        out.push(delta);
        continue;
      }
      const text = (this.held.get(delta.index) ?? '') + delta.content;
      const cut = this.firstStop(text);
      let emit: string;
      if (cut !== null) {
        emit = text.slice(0, cut);
        this.stopped.add(delta.index);
        this.held.delete(delta.index);
      } else {
        const keep = this.heldLength(text);
        emit = text.slice(0, text.length - keep);
        this.held.set(delta.index, text.slice(text.length - keep));
      }
      const { content: _content, ...rest } = delta;
      const piece: ChoiceDelta = emit !== '' ? { ...rest, content: emit } : rest;
      if (Object.keys(piece).length > 1) {
        out.push(piece);
      }
    }
    return out;
  }

  /** The end of the runtime's stream without a stop string: what is still held back. */
  drain(): ChoiceDelta[] {
    const out = [...this.held.entries()]
      .filter(([index, text]) => text !== '' && !this.stopped.has(index))
      .sort(([a], [b]) => a - b)
      .map(([index, content]) => ({ index, content }));
    this.held.clear();
    return out;
  }

  /**
   * The run's result: a choice that met a stop string finished with `stop` (the runtime, which never
   * saw the stop strings, may say otherwise); with no runtime result (it was left early), no usage.
   */
  result(runtime: BackendResult | null): BackendResult {
    const finish_reasons: FinishReason[] = Array.from({ length: this.n }, (_, index) =>
      this.stopped.has(index) ? 'stop' : (runtime?.finish_reasons[index] ?? 'stop'),
    );
    return { finish_reasons, usage: runtime?.usage ?? null };
  }

  /** The longest end of the text that a stop string starts with: it may go on into one. */
  private heldLength(text: string): number {
    for (let k = Math.min(this.hold, text.length); k > 0; k--) {
      const tail = text.slice(text.length - k);
      if (this.stops.some((s) => s.startsWith(tail))) {
        return k;
      }
    }
    return 0;
  }

  /** Where the text ends when it holds a stop string: after the earliest one. */
  private firstStop(text: string): number | null {
    let best: { at: number; end: number } | null = null;
    for (const stop of this.stops) {
      const at = stop.length > 0 ? text.indexOf(stop) : -1;
      if (at >= 0 && (best === null || at < best.at)) {
        best = { at, end: at + stop.length };
      }
    }
    return best?.end ?? null;
  }
}

/** The filter a task needs: only when it asks for stop strings to be kept. */
export function stopTextFilter(
  params: { stop?: string[]; include_stop_str_in_output?: boolean },
  n: number,
): StopTextFilter | null {
  return params.include_stop_str_in_output && params.stop?.length ? new StopTextFilter(params.stop, n) : null;
}
