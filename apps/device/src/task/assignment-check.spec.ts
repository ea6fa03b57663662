import type { Feature } from '@app/common/protocol/chat';
import { assignSchema } from '@app/common/protocol/messages';
import type { Backend } from '../backends/backend';
import { refusalOf } from './assignment-check';

const backend = (features: Feature[]) =>
  ({ features, available: () => true, models: () => ['m'] }) as unknown as Backend;

/** A resumed task as the dispatcher sends it, through the schema the link checks it against. */
const resumed = assignSchema.parse({
  task_address: 'network:6f1c2a44-5b9e-4d3a-9a7e-1c2d3e4f5a6b',
  model: 'm',
  attempt: 2,
  params: {
    messages: [{ role: 'user', content: 'Name three rivers.' }],
    max_tokens: 20,
    assistant_prefix: 'The Rhine',
  },
});

void describe('refusalOf', () => {
  const state = (features: Feature[]) => ({ running: true, currentTask: null, backend: backend(features) });

  void it('keeps a resumed task’s assistant_prefix, for the backend to continue', () => {
    expect(resumed.params.assistant_prefix).toBe('The Rhine');
  });

  void it('refuses a resumed task on a device that does not declare continue, and takes it on one that does', () => {
    expect(refusalOf(resumed, state(['tools', 'stream_usage']))).toEqual({
      reason: 'unsupported_feature',
      detail: { features: ['continue'] },
    });
    expect(refusalOf(resumed, state(['continue']))).toBeNull();
    const fresh = { ...resumed, params: { ...resumed.params, assistant_prefix: undefined } };
    expect(refusalOf(fresh, state([]))).toBeNull();
  });
});
