import { TaskStatus } from '../prisma/generated/enums';
import { ENDED_STATUSES, ERROR_STATUSES, LIVE_STATUSES, TASK_STATUSES, isEnded, sqlStatusList } from './task-statuses';
import { TASK_TRANSITIONS_LUA } from './task-transitions.lua';

describe('task statuses', () => {
  it("are the task_status enum's, in its order", () => {
    expect(TASK_STATUSES).toEqual(Object.values(TaskStatus));
  });

  it('are live or ended, each once', () => {
    expect(LIVE_STATUSES).toEqual(['queued', 'assigned', 'streaming']);
    expect(ENDED_STATUSES).toEqual(['completed', 'failed', 'cancelled', 'timed_out']);
    expect([...LIVE_STATUSES, ...ENDED_STATUSES].sort()).toEqual([...TASK_STATUSES].sort());
    expect(TASK_STATUSES.filter(isEnded)).toEqual(ENDED_STATUSES);
    expect(ERROR_STATUSES.every(isEnded)).toBe(true);
  });

  it('are what the transitions script takes for terminal', () => {
    const terminal = /local function terminal\(s\)\s+return (.*)\n/.exec(TASK_TRANSITIONS_LUA)?.[1];
    expect(terminal).toBe("s == 'completed' or s == 'failed' or s == 'cancelled' or s == 'timed_out'");
  });

  it('are written as an SQL list', () => {
    expect(sqlStatusList(LIVE_STATUSES)).toBe("('queued', 'assigned', 'streaming')");
  });
});
