import {
  closeDb,
  createDevice,
  createTenant,
  db,
  recordsWritten,
  startApi,
  startDispatcher,
  uniq,
} from '../support/stack';
import type { Api, Dispatcher, Proc } from '../support/stack';
import { postSse } from '../support/sse';
import { sseContent } from '../reliability/helpers';
import { startRuntimeDevice } from './support/device';
import type { ChatHandler } from './support/fake-runtimes';
import { FakeOllama, FakeOpenAI, conversationText, textPieces } from './support/fake-runtimes';

/**
 * Resume through real agents on fake runtimes that continue as the real ones do (Ollama a final
 * assistant message, vLLM `continue_final_message`): a runtime that fails mid-answer (Ollama's error
 * line, vLLM's error event, HTTP 5xx-class failures the agent reports as `upstream_error`) has its
 * answer continued by another device, and the client's stream equals the uninterrupted answer.
 */
describe('resume through real runtimes', () => {
  let api: Api;
  let dispatcher: Dispatcher;
  const procs: Proc[] = [];
  const runtimes: { stop(): Promise<void> }[] = [];
  const QUESTION = 'what does a relay do';
  const whole = conversationText([{ role: 'user', content: QUESTION }]);
  const pieces = textPieces(whole).length;

  beforeAll(async () => {
    [api, dispatcher] = await Promise.all([startApi(), startDispatcher()]);
  });

  afterAll(async () => {
    await Promise.all([
      ...procs.map((p) => p.stop()),
      api?.stop(),
      dispatcher?.stop(),
      ...runtimes.map((r) => r.stop()),
    ]);
    await closeDb();
  });

  /**
   * Two devices on two runtimes of the same kind, each of which fails a fresh answer after 3 pieces and
   * continues a resumed one to its end: whichever device the request lands on fails it, and whichever
   * takes it over finishes it.
   */
  async function pair(kind: 'ollama' | 'openai', failFresh: ChatHandler, cont: ChatHandler, upstreamModel: string) {
    const model = uniq(`resume-${kind}`);
    const tenant = await createTenant([model]);
    for (let i = 0; i < 2; i++) {
      const ollama = kind === 'ollama' ? new FakeOllama([upstreamModel]) : null;
      const openai = kind === 'openai' ? new FakeOpenAI([upstreamModel]) : null;
      const runtime = (ollama ?? openai)!;
      runtime.handlers.set(upstreamModel, (ctx) => (ctx.prefix === undefined ? failFresh(ctx) : cont(ctx)));
      await runtime.start();
      runtimes.push(runtime);
      const { token } = await createDevice();
      procs.push(
        await startRuntimeDevice(dispatcher, token, {
          backend: kind,
          upstream: ollama ? ollama.url : openai!.baseUrl,
          models: [`${model}=${upstreamModel}`],
        }),
      );
    }
    return { model, tenant };
  }

  async function streamed(model: string, key: string) {
    const res = await postSse(`${api.url}/v1/chat/completions`, key, {
      model,
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: QUESTION }],
    });
    expect(res.status).toBe(200);
    expect({ last: res.events.at(-1), events: res.events.slice(-3) }).toEqual(
      expect.objectContaining({ last: '[DONE]' }),
    );
    const chunks = res.events.filter((e) => e !== '[DONE]');
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    expect(chunks.filter((c) => c.choices?.[0]?.delta?.role).length).toBe(1);
    return { text: sseContent(res.events), usage: chunks.at(-1).usage, address: chunks[0].task_address as string };
  }

  it('Ollama fails mid-answer with its error line: another device continues the final assistant message', async () => {
    const { model, tenant } = await pair(
      'ollama',
      FakeOllama.conversation({ breakAfter: { chunks: 3, how: 'error' }, intervalMs: 20 }),
      FakeOllama.conversation({ promptEvalCount: 26 }),
      'llama3.2:3b',
    );
    const got = await streamed(model, tenant.key);
    expect(got.text).toBe(whole);
    // The uninterrupted answer's usage: its prompt (26), every piece of the answer once.
    expect(got.usage).toEqual({ prompt_tokens: 26, completion_tokens: pieces, total_tokens: 26 + pieces });
    await recordsWritten();
    const row = await db().task.findFirstOrThrow({ where: { address: got.address } });
    expect(row).toMatchObject({ status: 'completed', resumes: 1, completionTokens: pieces });
  }, 60_000);

  it('vLLM fails mid-answer with an error event: another device continues with continue_final_message', async () => {
    const { model, tenant } = await pair(
      'openai',
      FakeOpenAI.conversation({ breakAfter: { chunks: 3, how: 'error' }, intervalMs: 20 }),
      FakeOpenAI.conversation(),
      'Qwen/Qwen2.5-7B-Instruct',
    );
    const got = await streamed(model, tenant.key);
    expect(got.text).toBe(whole);
    expect(got.usage).toEqual({ prompt_tokens: 12, completion_tokens: pieces, total_tokens: 12 + pieces });
    await recordsWritten();
    const row = await db().task.findFirstOrThrow({ where: { address: got.address } });
    expect(row).toMatchObject({ status: 'completed', resumes: 1 });
  }, 60_000);
});
