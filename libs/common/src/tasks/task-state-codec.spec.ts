import { taskStateCodec } from './task-state-codec';
import type { TaskStateValues } from './task-state-codec';

/** A state with every field set to a value of its own. */
const full: TaskStateValues = {
  id: 'id-1',
  address: 'network:id-1',
  orgId: 'org-1',
  apiKeyId: 'key-1',
  modelId: 'llama3.2:3b',
  mode: 'network',
  api: 'ollama',
  kind: 'embedding',
  stream: true,
  line: 'chat.network.llama3%2E2%3A3b.org-1',
  apiInstance: 'api-1',
  deadline: 9_000,
  budgets: 'ok',
  traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
  status: 'streaming',
  version: 6,
  attempts: 1,
  queuedAt: new Date(1_000),
  assignedAt: new Date(2_000),
  firstTokenAt: new Date(3_000),
  finishedAt: new Date(4_000),
  deviceId: 'dev-1',
  dispatcherId: 'disp-1',
  token: 'tok-1',
  modelDigest: `sha256:${'d'.repeat(64)}`,
  finishReason: 'stop',
  errorCode: 'device_timeout',
  promptTokens: 5,
  completionTokens: 7,
  outputSha256: 'abc',
  outputBytes: 11,
  usageSource: 'device',
  resumes: 1,
  segments: '[]',
};

describe('the task state codec', () => {
  it('keeps the field names deployments hold (the records stream and live states carry them)', () => {
    expect(taskStateCodec.names).toEqual({
      id: 'id',
      address: 'addr',
      orgId: 'org',
      apiKeyId: 'key',
      budgets: 'bud',
      traceId: 'tr',
      modelId: 'model',
      mode: 'mode',
      api: 'api',
      kind: 'kind',
      stream: 'stream',
      line: 'line',
      apiInstance: 'apiid',
      deadline: 'dl',
      status: 'st',
      version: 'ver',
      attempts: 'att',
      queuedAt: 'q',
      assignedAt: 'as',
      firstTokenAt: 'ft',
      finishedAt: 'fin',
      deviceId: 'dev',
      dispatcherId: 'disp',
      token: 'tok',
      modelDigest: 'dig',
      finishReason: 'fr',
      errorCode: 'err',
      promptTokens: 'pt',
      completionTokens: 'ct',
      outputSha256: 'sha',
      outputBytes: 'ob',
      usageSource: 'us',
      resumes: 'rs',
      segments: 'segs',
    });
  });

  it('reads back every field it wrote', () => {
    const hash = taskStateCodec.encode(full);
    expect(Object.keys(hash)).toHaveLength(Object.keys(full).length);
    expect(taskStateCodec.decode(hash)).toEqual(full);
  });

  it('reads what a queued task lacks as null', () => {
    const queued: TaskStateValues = {
      ...full,
      apiKeyId: null,
      stream: false,
      status: 'queued',
      version: 0,
      attempts: 0,
      assignedAt: null,
      firstTokenAt: null,
      finishedAt: null,
      deviceId: null,
      dispatcherId: null,
      token: null,
      finishReason: null,
      errorCode: null,
      promptTokens: null,
      completionTokens: null,
      outputSha256: null,
      outputBytes: null,
      usageSource: null,
    };
    const hash = taskStateCodec.encode(queued);
    expect(hash).toMatchObject({ key: '', stream: '0', dev: '', pt: '' });
    expect(taskStateCodec.decode(hash)).toEqual(queued);
    // What the script leaves out altogether reads the same as what it wrote empty.
    const written = Object.fromEntries(Object.entries(hash).filter(([, v]) => v !== ''));
    expect(taskStateCodec.decode(written)).toEqual(queued);
  });

  it('reads and writes both kinds', () => {
    for (const kind of ['chat', 'embedding'] as const) {
      const hash = taskStateCodec.encode({ ...full, kind });
      expect(hash.kind).toBe(kind);
      expect(taskStateCodec.decode(hash)).toEqual({ ...full, kind });
    }
  });

  it('reads a state written before task kinds (no kind field) as chat', () => {
    const { kind: _kind, ...older } = taskStateCodec.encode(full);
    expect(older).not.toHaveProperty('kind');
    expect(taskStateCodec.decode(older)).toEqual({ ...full, kind: 'chat' });
    expect(taskStateCodec.decode({ ...older, kind: '' }).kind).toBe('chat');
  });

  it('describes every field for the docs', () => {
    expect(taskStateCodec.describe().map((d) => d.field)).toEqual(Object.values(taskStateCodec.names));
    expect(taskStateCodec.describe().every((d) => d.holds.length > 0)).toBe(true);
  });
});
