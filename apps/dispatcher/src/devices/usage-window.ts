/** How many of a network device's last completed tasks its usage reports are judged over. */
export const USAGE_WINDOW = 20;
/** How many of those may disagree with the relayed output before the device is quarantined. */
export const USAGE_DISAGREEMENTS = 5;
/** Tokens a report may hold beyond the relayed bytes, per choice: end-of-turn and other tokens without text. */
export const USAGE_SLACK_PER_CHOICE = 16;

/**
 * Whether a device's report of completion tokens disagrees with the output the relay passed on. Every
 * token a runtime generates decodes to at least a byte of what it streams (a character of several
 * bytes may take several tokens, never the reverse), but for a few without text (end of turn): so an
 * honest report is at most the relayed bytes (content, reasoning, tool calls) plus a little, however
 * the runtime splits its stream into events. A report beyond that claims tokens nobody received.
 */
export function usageDisagrees(reportedCompletionTokens: number, relayedBytes: number, choices: number): boolean {
  return reportedCompletionTokens > relayedBytes + USAGE_SLACK_PER_CHOICE * choices;
}

/** A device's last USAGE_WINDOW judgements, and how many of them disagreed. */
export class UsageWindow {
  private readonly marks: boolean[] = [];
  private count = 0;

  /** Adds a judgement; returns how many of the window's disagree. */
  add(disagrees: boolean): number {
    this.marks.push(disagrees);
    this.count += disagrees ? 1 : 0;
    if (this.marks.length > USAGE_WINDOW) {
      this.count -= this.marks.shift() ? 1 : 0;
    }
    return this.count;
  }
}
