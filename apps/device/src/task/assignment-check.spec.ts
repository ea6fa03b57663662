import type { Feature } from '@app/common/protocol/chat';
import { chatAssignSchema, embedAssignSchema } from '@app/common/protocol/messages';
import type { Backend } from '../backends/backend';
import { refusalOf } from './assignment-check';

const backend = (features: Feature[]) =>
  ({ features, available: () => true, models: () => ['m'] }) as unknown as Backend;

/** A resumed task as the dispatcher sends it, through the schema the link checks it against. */
const resumed = chatAssignSchema.parse({
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
  const state = (features: Feature[]) => ({ running: true, held: [], backend: backend(features) });

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

  void it('takes an embedding task only with the features its inputs and dimensions need', () => {
    const embed = (params: object) =>
      embedAssignSchema.parse({
        task_address: resumed.task_address,
        model: 'm',
        attempt: 1,
        kind: 'embed',
        embed: params,
      });
    const refused = (features: string[]) => ({ reason: 'unsupported_feature', detail: { features } });
    expect(refusalOf(embed({ input: ['a'] }), state(['tools', 'continue']))).toEqual(refused(['embeddings']));
    expect(refusalOf(embed({ input: ['a'] }), state(['embeddings']))).toBeNull();
    expect(refusalOf(embed({ input: [[1, 2]] }), state(['embeddings']))).toEqual(refused(['embed_tokens']));
    expect(refusalOf(embed({ input: ['a'], dimensions: 64 }), state(['embeddings']))).toEqual(
      refused(['embed_dimensions']),
    );
    expect(
      refusalOf(embed({ input: [[1]], dimensions: 64 }), state(['embeddings', 'embed_tokens', 'embed_dimensions'])),
    ).toBeNull();
  });

  void it('takes a second embedding task beside one when it embeds, and nothing else beside a task', () => {
    const embed = embedAssignSchema.parse({
      task_address: resumed.task_address,
      model: 'm',
      attempt: 1,
      kind: 'embed',
      embed: { input: ['a'] },
    });
    const fresh = chatAssignSchema.parse({ ...resumed, params: { ...resumed.params, assistant_prefix: undefined } });
    const holding = (features: Feature[], ...kinds: ('chat' | 'embed')[]) => ({
      running: true,
      held: kinds.map((kind, i) => ({ address: `network:held-${i}`, kind })),
      backend: backend(features),
    });
    const busy = (n: number) => ({
      reason: 'busy',
      detail: { running_tasks: Array.from({ length: n }, (_, i) => `network:held-${i}`) },
    });
    expect(refusalOf(embed, holding(['embeddings'], 'embed'))).toBeNull();
    expect(refusalOf(embed, holding(['embeddings'], 'embed', 'embed'))).toEqual(busy(2));
    expect(refusalOf(embed, holding(['embeddings'], 'chat'))).toEqual(busy(1));
    expect(refusalOf(fresh, holding(['embeddings'], 'embed'))).toEqual(busy(1));
    expect(refusalOf(fresh, holding(['embeddings'], 'chat'))).toEqual(busy(1));
  });
});
