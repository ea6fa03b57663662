import assert from 'node:assert/strict';
import { heartbeat } from './heartbeat';

void describe('heartbeat', () => {
  void it('pings every two thirds of the inactivity window and waits the rest for the answer', () => {
    assert.deepEqual(heartbeat(15_000), { pingInterval: 10_000, pingTimeout: 5_000 });
    assert.deepEqual(heartbeat(6_000), { pingInterval: 4_000, pingTimeout: 2_000 });
  });

  void it('notices silence within a window of 3 s or more', () => {
    for (const window of [3_000, 4_001, 15_000, 60_000]) {
      const { pingInterval, pingTimeout } = heartbeat(window);
      assert.equal(pingInterval + pingTimeout, window);
    }
  });

  void it('never pings or waits less than a second', () => {
    assert.deepEqual(heartbeat(1_000), { pingInterval: 1_000, pingTimeout: 1_000 });
  });
});
