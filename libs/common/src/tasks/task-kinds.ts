import type { TaskKind } from '../prisma/generated/enums';

/**
 * Every task kind, in the `task_kind` enum's order: what the task records, the usage reports and the
 * OpenAPI enum name. Fails to compile when the enum gains a kind that is not listed here.
 */
const KINDS = { chat: true, embedding: true } as const satisfies Record<TaskKind, true>;

export const TASK_KINDS = Object.keys(KINDS) as [TaskKind, ...TaskKind[]];
