import { USAGE_DISAGREEMENTS, USAGE_WINDOW, UsageWindow, usageDisagrees } from './usage-window';

describe('usageDisagrees', () => {
  it('accepts any report up to the relayed bytes plus a slack per choice, however the stream was split', () => {
    // 40 bytes relayed in one event (a tool call sent whole) or in 40: up to 56 tokens is honest.
    expect(usageDisagrees(56, 40, 1)).toBe(false);
    expect(usageDisagrees(57, 40, 1)).toBe(true);
    // Two choices, two ends of turn.
    expect(usageDisagrees(72, 40, 2)).toBe(false);
    // Nothing relayed: a device that claims the whole max_tokens for it disagrees.
    expect(usageDisagrees(512, 0, 1)).toBe(true);
  });
});

describe('UsageWindow', () => {
  it('counts the disagreements among the last USAGE_WINDOW judgements only', () => {
    const window = new UsageWindow();
    for (let i = 0; i < USAGE_DISAGREEMENTS - 1; i++) {
      expect(window.add(true)).toBe(i + 1);
    }
    // Honest reports push the old disagreements out of the window.
    for (let i = 0; i < USAGE_WINDOW - 1; i++) {
      window.add(false);
    }
    expect(window.add(false)).toBe(0);
    expect(window.add(true)).toBe(1);
  });
});
