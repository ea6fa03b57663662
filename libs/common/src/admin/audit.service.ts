import { z } from 'zod';
import { AppError } from '../errors/app-error';
import type { AuditVia } from '../prisma/generated/enums';
import { AUDIT_FAMILIES, AUDIT_KIND_NAMES, AUDIT_PAGE_DEFAULT, AUDIT_PAGE_MAX } from './audit-kinds';
import type { AuditJson } from './audit';
import type { AuditKind } from './audit-kinds';

export { AUDIT_FAMILIES, AUDIT_KIND_NAMES, AUDIT_PAGE_DEFAULT, AUDIT_PAGE_MAX } from './audit-kinds';
import type { Sql } from './sql';

/** A validated request for a page of the log: newest first, at or after `since`, older than entry `after`. */
export interface AuditQuery {
  since: Date | null;
  /** The kinds asked for; null: every kind. */
  kinds: AuditKind[] | null;
  limit: number;
  /** The id of the last entry of the previous page (its `last_id`). */
  after: string | null;
}

/** The parameters as the wire (the query string, the CLI's options) spells them: strings, or absent. */
export interface AuditQueryParams {
  since?: string;
  kind?: string;
  limit?: string;
  after?: string;
}

/** One entry of the log, as the admin API, the CLI and the dashboard show it. */
export interface AuditEntryRecord {
  id: string;
  at: string;
  actor: string;
  via: AuditVia;
  kind: string;
  target: string;
  before: AuditJson;
  after: AuditJson;
}

/** A page of the log, in the shape of OpenAI's paged lists: pass `last_id` as `after` for the next one. */
export interface AuditPage {
  object: 'list';
  data: AuditEntryRecord[];
  first_id: string | null;
  last_id: string | null;
  has_more: boolean;
}

const DATE = /^\d{4}-\d{2}-\d{2}$/;
/** Entry ids are a BIGSERIAL: 1 to 19 digits. */
const ENTRY_ID = /^[1-9][0-9]{0,18}$/;
const LIMIT = /^[1-9][0-9]{0,3}$/;

const invalid = (param: string, message: string) => new AppError('invalid_request', message, param);

/** A calendar date (UTC midnight) or a date-time with its zone; null when it is neither. */
function parseSince(value: string): Date | null {
  if (DATE.test(value)) {
    const date = new Date(`${value}T00:00:00.000Z`);
    // 2026-02-30 parses (as March 2nd): only a date that round-trips is one.
    return !Number.isNaN(date.getTime()) && date.toISOString().startsWith(value) ? date : null;
  }
  if (!z.iso.datetime({ offset: true }).safeParse(value).success) {
    return null;
  }
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? null : date;
}

/** Checks the parameters of a page request; a bad one is 400 invalid_request naming it. */
export function parseAuditQuery(params: AuditQueryParams): AuditQuery {
  let since: Date | null = null;
  if (params.since !== undefined) {
    since = parseSince(params.since);
    if (!since) {
      throw invalid(
        'since',
        `Invalid 'since': expected a date (2026-12-01) or a date-time with a zone (2026-12-01T08:00:00Z), got '${params.since}'`,
      );
    }
  }
  let kinds: AuditKind[] | null = null;
  if (params.kind !== undefined) {
    const kind = params.kind;
    if ((AUDIT_KIND_NAMES as string[]).includes(kind)) {
      kinds = [kind as AuditKind];
    } else if (AUDIT_FAMILIES.includes(kind)) {
      kinds = AUDIT_KIND_NAMES.filter((k) => k.startsWith(`${kind}.`));
    } else {
      throw invalid(
        'kind',
        `Invalid 'kind': '${kind}' is none of ${AUDIT_KIND_NAMES.join(', ')} (or a family: ${AUDIT_FAMILIES.join(', ')})`,
      );
    }
  }
  let limit = AUDIT_PAGE_DEFAULT;
  if (params.limit !== undefined) {
    limit = LIMIT.test(params.limit) ? Number(params.limit) : 0;
    if (limit < 1 || limit > AUDIT_PAGE_MAX) {
      throw invalid('limit', `Invalid 'limit': expected a whole number from 1 to ${AUDIT_PAGE_MAX}`);
    }
  }
  if (params.after !== undefined && !ENTRY_ID.test(params.after)) {
    throw invalid('after', "Invalid 'after': expected an entry's id (a page's last_id)");
  }
  return { since, kinds, limit, after: params.after ?? null };
}

interface EntryRow {
  id: string | bigint;
  at: Date;
  actor: string;
  via: AuditVia;
  kind: string;
  target: string;
  before: AuditJson;
  after: AuditJson;
}

/** Reads the audit log (the admin services write it: audit.ts). */
export class AdminAuditService {
  constructor(private readonly sql: Sql) {}

  /** A page of entries, newest first. */
  async list(query: AuditQuery): Promise<AuditPage> {
    const where: string[] = [];
    const values: unknown[] = [];
    if (query.since) {
      values.push(query.since);
      where.push(`at >= $${values.length}::timestamptz`);
    }
    if (query.kinds) {
      values.push(query.kinds);
      where.push(`kind = ANY($${values.length}::text[])`);
    }
    if (query.after) {
      values.push(query.after);
      where.push(`id < $${values.length}::bigint`);
    }
    // One more than the page: whether there is a next one, without counting.
    values.push(query.limit + 1);
    const rows = await this.sql.query<EntryRow>(
      `SELECT id, at, actor, via::text AS via, kind, target, before, after FROM audit_log
       ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY id DESC LIMIT $${values.length}::int`,
      values,
    );
    const data = rows.slice(0, query.limit).map((r) => ({
      id: String(r.id),
      at: r.at.toISOString(),
      actor: r.actor,
      via: r.via,
      kind: r.kind,
      target: r.target,
      before: r.before,
      after: r.after,
    }));
    return {
      object: 'list',
      data,
      first_id: data[0]?.id ?? null,
      last_id: data.at(-1)?.id ?? null,
      has_more: rows.length > query.limit,
    };
  }
}
