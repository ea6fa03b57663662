import { heartbeat } from './heartbeat';

void describe('heartbeat', () => {
  void it('pings every two thirds of the inactivity window and waits the rest for the answer', () => {
    expect(heartbeat(15_000)).toStrictEqual({ pingInterval: 10_000, pingTimeout: 5_000 });
    expect(heartbeat(6_000)).toStrictEqual({ pingInterval: 4_000, pingTimeout: 2_000 });
  });

  void it('notices silence within a window of 3 s or more', () => {
    for (const window of [3_000, 4_001, 15_000, 60_000]) {
      const { pingInterval, pingTimeout } = heartbeat(window);
      expect(pingInterval + pingTimeout).toBe(window);
    }
  });

  void it('never pings or waits less than a second', () => {
    expect(heartbeat(1_000)).toStrictEqual({ pingInterval: 1_000, pingTimeout: 1_000 });
  });
});
