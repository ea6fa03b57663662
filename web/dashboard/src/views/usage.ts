import { api } from '../api';
import type { UsageReport } from '../admin-types';
import { h, table } from '../dom';
import { ms, text } from '../format';
import type { View, ViewContext } from '../view';

const monthStart = () => new Date().toISOString().slice(0, 8) + '01';
/** The range chosen (dates, UTC); `to` empty: up to now. Kept while the page is open. */
const range = { from: monthStart(), to: '' };

/** Usage by organization and model over a range of dates (this month by default). */
async function render({ fill, refresh }: ViewContext): Promise<void> {
  const query = new URLSearchParams({ group_by: 'org,model', from: range.from });
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
  fill(
    h(
      'div',
      { class: 'form' },
      'From',
      input('from'),
      'to',
      input('to'),
      h('span', { class: 'muted' }, '(empty: now)'),
    ),
    report.data.length
      ? table(
          [
            'Org',
            'Model',
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
            r.model ?? '',
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

/** Usage: requests and tokens per organization and model. */
export const usageView: View = { name: 'Usage', live: false, render };
