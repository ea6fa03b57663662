import { api } from '../api';
import type { QueueList } from '../admin-types';
import { h, table } from '../dom';
import { text } from '../format';
import type { View, ViewContext } from '../view';

/** Every queue with a device online or a job waiting, and each organization's line in it. */
async function render({ fill }: ViewContext): Promise<void> {
  const data = (await api<QueueList>('GET', '/admin/queues')).data;
  fill(
    data.length === 0
      ? h('p', { class: 'muted' }, 'No queue has a device online or a job waiting.')
      : table(
          ['Model', 'Pool', 'Org', 'Waiting', 'Oldest wait', 'Devices', 'Busy', 'Lines'],
          data.map((q) => [
            q.model,
            q.pool,
            text(q.org),
            String(q.waiting),
            q.oldest_wait_ms === null ? '–' : `${(q.oldest_wait_ms / 1000).toFixed(1)} s`,
            String(q.devices_online),
            String(q.devices_busy),
            text(q.lines.map((l) => `${l.org ?? l.org_id}: ${l.waiting}`)),
          ]),
          'queues-table',
        ),
  );
}

/** Queues: what waits where. */
export const queuesView: View = { name: 'Queues', live: true, render };
