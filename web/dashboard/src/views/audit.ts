// The kinds and the diff come from libs/common by path: two files without imports, bundled as they are.
import { auditChangeLines } from '../../../../libs/common/src/admin/audit-diff';
import { AUDIT_FAMILIES, AUDIT_KIND_NAMES } from '../../../../libs/common/src/admin/audit-kinds';
import { api } from '../api';
import type { AuditEntry, AuditPage } from '../admin-types';
import { h, table } from '../dom';
import type { View, ViewContext } from '../view';

/** Entries per page: a screenful or two. */
const PAGE_SIZE = 50;

/**
 * The filters (a kind or a family, a first day), the page shown (`after`: the cursor it was asked with)
 * and the cursors of the pages before it, to go back. Kept while the page is open.
 */
const state = { kind: '', since: '', after: '', newer: [] as string[] };

/** What an entry changed: each field as `field: before → after`; a creation or removal folded under its word. */
function changes(entry: AuditEntry): Node {
  const lines = auditChangeLines(entry.before, entry.after).map((line) => h('div', {}, line));
  if (entry.before !== null && entry.after !== null) {
    return h('div', { class: 'changes' }, ...(lines.length ? lines : [h('span', { class: 'muted' }, 'no change')]));
  }
  return h('details', {}, h('summary', {}, entry.before === null ? 'created' : 'removed'), ...lines);
}

/** A button, disabled when it leads nowhere. */
const pager = (label: string, enabled: boolean, click: () => void) =>
  h('button', { click, ...(enabled ? {} : { disabled: '' }) }, label);

/** The audit log: every admin change, newest first, by kind and from a day on. */
async function render({ fill, refresh }: ViewContext): Promise<void> {
  const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
  for (const name of ['kind', 'since', 'after'] as const) {
    if (state[name]) {
      query.set(name, state[name]);
    }
  }
  const page = await api<AuditPage>('GET', `/admin/audit?${query.toString()}`);
  const filtered = (change: () => void) => () => {
    change();
    // Another filter: back to the newest page.
    state.after = '';
    state.newer = [];
    void refresh();
  };
  const kind = h(
    'select',
    { name: 'kind', change: (e) => filtered(() => (state.kind = (e.target as HTMLSelectElement).value))() },
    h('option', { value: '' }, 'every kind'),
    ...AUDIT_FAMILIES.map((f) => h('option', { value: f }, `${f}.*`)),
    ...AUDIT_KIND_NAMES.map((k) => h('option', { value: k }, k)),
  );
  kind.value = state.kind;
  const since = h('input', {
    type: 'date',
    name: 'since',
    value: state.since,
    change: (e) => filtered(() => (state.since = (e.target as HTMLInputElement).value))(),
  });
  const newer = pager('Newer', state.newer.length > 0 || state.after !== '', () => {
    state.after = state.newer.pop() ?? '';
    void refresh();
  });
  const older = pager('Older', page.has_more, () => {
    state.newer.push(state.after);
    state.after = page.last_id ?? '';
    void refresh();
  });
  fill(
    h('div', { class: 'form' }, 'Kind', kind, 'Since', since, h('span', { class: 'muted' }, '(UTC; empty: ever)')),
    page.data.length
      ? table(
          ['At', 'Via', 'Actor', 'Kind', 'Target', 'Changes'],
          page.data.map((e) => [e.at, e.via, e.actor, e.kind, e.target, changes(e)]),
          'audit-table',
        )
      : h('p', { class: 'muted' }, 'No admin change recorded.'),
    h('div', { class: 'form' }, newer, older),
  );
}

/** Audit: who changed what, through the admin API, the dashboard or the CLI. */
export const auditView: View = { name: 'Audit', live: false, render };
