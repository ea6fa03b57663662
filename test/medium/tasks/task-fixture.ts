import { randomUUID } from 'node:crypto';
import type { Pool } from 'pg';
import { AdminService, TaskRecordWriter, createLogger, createRedis } from '@app/common';
import type { NewTask, SqlRunner } from '@app/common';
import { createPool } from '../../../libs/common/src/prisma/pool';
import { DATABASE_URL, REDIS_URL, createDevice, createTenant, db, uniq } from '../../support/stack';
import type { Tenant } from '../../support/stack';

/** The lifetimes the task suites give TaskRepository: long enough that nothing expires during a test. */
export const TASK_TTLS = { liveTtlMs: 60_000, endedTtlMs: 60_000, streamTtlS: 60 };

/**
 * What a task record names (foreign keys): a network model of the suite's own, a tenant it is enabled
 * for, and registered devices.
 */
export interface TaskOwners {
  model: string;
  tenant: Tenant;
  deviceIds: string[];
}

export async function createTaskOwners(modelPrefix: string, devices = 2): Promise<TaskOwners> {
  const model = uniq(modelPrefix);
  await new AdminService(db()).addModel({ id: model, network: true });
  const tenant = await createTenant([model]);
  const deviceIds: string[] = [];
  for (let i = 0; i < devices; i++) {
    deviceIds.push((await createDevice()).id);
  }
  return { model, tenant, deviceIds };
}

/** A new network chat task of the owners' tenant and model, due in a minute. */
export function newTaskOf(owners: TaskOwners, fields: Partial<NewTask> = {}): NewTask {
  const id = randomUUID();
  return {
    id,
    address: `network:${id}`,
    orgId: owners.tenant.org.id,
    apiKeyId: owners.tenant.keyId,
    modelId: owners.model,
    mode: 'network',
    api: 'openai',
    kind: 'chat',
    stream: true,
    line: `chat.network.${owners.model}.${owners.tenant.org.id}`,
    apiInstance: 'api-medium',
    deadline: Date.now() + 60_000,
    ...fields,
  };
}

/** A running record writer, as a process runs one: its own Redis connection and Postgres pool. */
export interface RecordWriterFixture {
  sql: SqlRunner;
  writer: TaskRecordWriter;
  /** Stops the writer and closes its pool. */
  stop(): Promise<void>;
}

export function startRecordWriter(): RecordWriterFixture {
  const pool: Pool = createPool(DATABASE_URL, 2);
  const sql: SqlRunner = { sql: (text, values) => pool.query(text, values) };
  const writer = new TaskRecordWriter(createRedis(REDIS_URL), sql, createLogger('test', 'silent'), uniq('writer'));
  writer.start();
  return {
    sql,
    writer,
    stop: async () => {
      await writer.stop();
      await pool.end();
    },
  };
}
