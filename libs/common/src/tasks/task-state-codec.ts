import type { TaskApi, TaskKind, TaskMode, TaskStatus } from '../prisma/generated/enums';
import { HashCodec, hashField } from '../redis/hash-codec';
import type { HashField } from '../redis/hash-codec';
import type { TaskSnapshot } from './task-state';

/** Everything a task's state hash holds: its snapshot, and its deadline. */
export type TaskStateValues = TaskSnapshot & { deadline: number; budgets: string | null };

const f = hashField;

/**
 * A task's state hash (`sy:t:<id>`, see keys.taskState), written by the transitions script and read
 * by TaskRepository and the record writer. Field names are short because each transition copies the
 * whole hash to the records stream.
 */
export const taskStateCodec = new HashCodec({
  id: f.text('id', 'the task id'),
  address: f.text('addr', 'its task address, `<mode>:<id>`'),
  orgId: f.text('org', 'its organization'),
  apiKeyId: f.optionalText('key', 'the API key that asked (empty: none)'),
  modelId: f.text('model', 'the model id'),
  mode: f.text<TaskMode>('mode', '`direct` or `network`'),
  api: f.text<TaskApi>('api', '`openai` or `ollama`'),
  // Absent from the states written before embeddings, which were all chat.
  kind: f.textOr<TaskKind>('kind', '`chat` or `embedding` (absent: `chat`)', 'chat'),
  stream: f.flag('stream', 'whether the client streams'),
  line: f.text('line', 'the line its job waits in'),
  apiInstance: f.text('apiid', 'the api instance that holds the client'),
  deadline: f.integer('dl', 'its deadline: past it, the reaper ends the task'),
  traceId: f.optionalText('tr', 'the trace id of its request, when traces are exported (absent: none)'),
  budgets: f.optionalText(
    'bud',
    'which monthly budgets its tokens count against: `o` its org’s, `k` its key’s, `ok` both (absent: none)',
  ),
  status: f.text<TaskStatus>('st', 'its status'),
  version: f.integer('ver', 'the version of this state (attempt a: 4a+1 assigned, 4a+2 streaming, 4a+3 requeued)'),
  attempts: f.integer('att', 'claims so far'),
  queuedAt: f.time('q', 'when it was queued'),
  assignedAt: f.optionalTime('as', 'when its current attempt was assigned'),
  firstTokenAt: f.optionalTime('ft', 'when its first output was relayed'),
  finishedAt: f.optionalTime('fin', 'when it ended'),
  deviceId: f.optionalText('dev', 'the device of the current assignment'),
  dispatcherId: f.optionalText('disp', 'the dispatcher of the current assignment'),
  token: f.optionalText('tok', "the current assignment's BullMQ lock token"),
  modelDigest: f.optionalText('dig', 'the model digest its device announced (empty: none)'),
  finishReason: f.optionalText('fr', 'the finish reason of choice 0'),
  errorCode: f.optionalText('err', 'the error code it ended with'),
  promptTokens: f.optionalInteger('pt', 'prompt tokens'),
  completionTokens: f.optionalInteger('ct', 'completion tokens'),
  outputSha256: f.optionalText('sha', 'the SHA-256 of its output'),
  outputBytes: f.optionalInteger('ob', 'UTF-8 bytes of output relayed to the client'),
  usageSource: f.optionalText<'device' | 'relay'>('us', 'who counted the tokens: `device` or `relay`'),
  resumes: f.optionalInteger('rs', 'how many times it was resumed on another device after output (absent: none)'),
  segments: f.optionalText('segs', "a resumed task's segments, as JSON (written at its ending)"),
} satisfies { [K in keyof TaskStateValues]: HashField<TaskStateValues[K]> });

/** The task state's field names, for the transitions script's template. */
export const TASK_FIELDS = taskStateCodec.names;
