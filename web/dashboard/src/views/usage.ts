import { api } from '../api';
import type { UsageReport } from '../admin-types';
import { h, table } from '../dom';
import { ms, text } from '../format';
import type { View, ViewContext } from '../view';

/**
 * What a row is: an organization's use of one model (with the model's kind of tasks), or of one kind
 * of task (chat or embedding) across its models.
 */
const GROUPINGS = {
  model: { label: 'by model', groupBy: 'org,model,kind' },
  kind: { label: 'by kind', groupBy: 'org,kind' },
} as const;
type Grouping = keyof typeof GROUPINGS;

const monthStart = () => new Date().toISOString().slice(0, 8) + '01';
/** The range chosen (dates, UTC; `to` empty: up to now) and the grouping. Kept while the page is open. */
const range = { from: monthStart(), to: '', by: 'model' as Grouping };

/** Usage by organization and model, or by organization and kind, over a range of dates (this month by default). */
async function render({ fill, refresh }: ViewContext): Promise<void> {
  const query = new URLSearchParams({ group_by: GROUPINGS[range.by].groupBy, from: range.from });
  if (range.to) {
    query.set('to', range.to);
  }
  const report = await api<UsageReport>('GET', `/admin/usage?${query.toString()}`);
  const input = (name: 'from' | 'to') =>
    h('input', {
      type: 'date',
      name,
      value: range[name],
      change: (e) => ((range[name] = (e.target as HTMLInputElement).value), void refresh()),
    });
  const grouping = h(
    'select',
    { name: 'group', change: (e) => ((range.by = (e.target as HTMLSelectElement).value as Grouping), void refresh()) },
    ...Object.entries(GROUPINGS).map(([value, g]) => h('option', { value }, g.label)),
  );
  grouping.value = range.by;
  const byModel = range.by === 'model';
  fill(
    h(
      'div',
      { class: 'form' },
      'From',
      input('from'),
      'to',
      input('to'),
      h('span', { class: 'muted' }, '(empty: now)'),
      grouping,
    ),
    report.data.length
      ? table(
          [
            'Org',
            ...(byModel ? ['Model'] : []),
            'Kind',
            'Requests',
            'Completed',
            'Failed',
            'Cancelled',
            'Prompt tokens',
            'Completion tokens',
            'TTFT p50',
            'Duration p50',
          ],
          report.data.map((r) => [
            text(r.org),
            // Grouped by model, every row has one.
            ...(byModel ? [r.model ?? ''] : []),
            text(r.kind),
            String(r.requests),
            String(r.completed),
            String(r.failed),
            String(r.cancelled),
            String(r.prompt_tokens),
            String(r.completion_tokens),
            ms(r.ttft_ms.p50),
            ms(r.duration_ms.p50),
          ]),
          'usage-table',
        )
      : h('p', { class: 'muted' }, 'No usage in this range.'),
  );
}

/** Usage: requests and tokens per organization and model, or per organization and kind. */
export const usageView: View = { name: 'Usage', live: false, render };
