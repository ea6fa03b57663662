import { PROTOCOL_VERSION } from '@app/common';
import type { Feature } from '@app/common';
import { DeviceSession } from '../devices/device-session';
import type { DeviceSocket } from '../devices/device-session';
import type { TaskJob } from '../queues/job-source.service';
import { EmbedCollector } from '../relay/embed-collector';
import { OutputTracker } from '../relay/output-tracker';
import { Assignment } from './assignment';
import { AssignmentBook } from './assignment-book';

/** A session whose device announced these features. */
function session(features: Feature[]): DeviceSession {
  const socket = {
    data: { deviceId: 'device-1', orgId: null, protocol: PROTOCOL_VERSION },
    connected: true,
    emit: () => true,
  };
  const s = new DeviceSession(socket as unknown as DeviceSocket);
  Object.defineProperty(s, 'supports', {
    value: (need: readonly Feature[]) => need.every((f) => features.includes(f)),
  });
  return s;
}

let next = 0;
function assignment(s: DeviceSession, kind: 'chat' | 'embed'): Assignment {
  const id = `task-${++next}`;
  const job = {
    id,
    queueName: 'chat.network.m.org',
    data: { taskId: id, taskAddress: `network:${id}` },
  } as unknown as TaskJob;
  const tracker = new OutputTracker(1, 1, { tokens: 1, bytes: 1 });
  return new Assignment(s, job, 'token', tracker, kind === 'embed' ? new EmbedCollector({ input: ['a'] }) : null);
}

describe('AssignmentBook', () => {
  it('a device that announces embed_prefetch may hold a second embedding task beside one, never a third', () => {
    const book = new AssignmentBook();
    const device = session(['embeddings', 'embed_prefetch']);
    const first = assignment(device, 'embed');
    book.add(first);
    expect(book.prefetchBeside(device)).toBe(first);
    const second = assignment(device, 'embed');
    book.add(second);
    expect(book.prefetchBeside(device)).toBeUndefined();
    expect(book.heldBy(device)).toEqual([first, second]);
    expect(book.held(device, second.address)).toBe(second);
    expect(book.size).toBe(2);
    expect([...book.all()]).toEqual([first, second]);
  });

  it('no second task beside a chat one, nor for a device without embed_prefetch', () => {
    const book = new AssignmentBook();
    const prefetching = session(['embeddings', 'embed_prefetch']);
    book.add(assignment(prefetching, 'chat'));
    expect(book.prefetchBeside(prefetching)).toBeUndefined();
    const plain = session(['embeddings']);
    book.add(assignment(plain, 'embed'));
    expect(book.prefetchBeside(plain)).toBeUndefined();
  });

  it('releasing one of two leaves the other held, frees the device for another beside it, and remembers both endings', () => {
    const book = new AssignmentBook();
    const freed: DeviceSession[] = [];
    book.whenFree((s) => freed.push(s));
    const device = session(['embeddings', 'embed_prefetch']);
    const [first, second] = [assignment(device, 'embed'), assignment(device, 'embed')];
    book.add(first);
    book.add(second);
    book.release(first);
    expect(freed).toEqual([device]);
    expect(book.busy(device)).toBe(true);
    expect(book.heldBy(device)).toEqual([second]);
    expect(book.prefetchBeside(device)).toBe(second);
    expect(book.forTask(first.taskId)).toBeUndefined();
    book.release(second);
    expect(book.busy(device)).toBe(false);
    expect(book.size).toBe(0);
    // Late events of either may still cross their endings on the wire.
    expect(book.heldLast(device, first.address)).toBe(true);
    expect(book.heldLast(device, second.address)).toBe(true);
  });
});
