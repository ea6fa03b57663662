import { answersCanary, canaryDelay } from './canary-check';

describe('answersCanary', () => {
  it('equals: the whole answer, whitespace around it aside', () => {
    expect(answersCanary({ equals: 'Paris' }, 'Paris')).toBe(true);
    expect(answersCanary({ equals: 'Paris' }, ' Paris\n')).toBe(true);
    expect(answersCanary({ equals: 'Paris' }, 'Paris.')).toBe(false);
    expect(answersCanary({ equals: 'Paris' }, 'paris')).toBe(false);
    expect(answersCanary({ equals: 'Paris' }, 'It is Paris')).toBe(false);
    expect(answersCanary({ equals: 'Paris' }, '')).toBe(false);
  });

  it('contains: anywhere in the answer, as written', () => {
    expect(answersCanary({ contains: '42' }, 'The answer is 42.')).toBe(true);
    expect(answersCanary({ contains: '42' }, 'forty-two')).toBe(false);
    expect(answersCanary({ contains: 'Paris' }, 'PARIS')).toBe(false);
  });
});

describe('canaryDelay', () => {
  it('is the interval give or take a quarter', () => {
    expect(canaryDelay(600_000, 0)).toBe(450_000);
    expect(canaryDelay(600_000, 0.5)).toBe(600_000);
    expect(canaryDelay(600_000, 0.999999)).toBe(750_000);
  });
});
