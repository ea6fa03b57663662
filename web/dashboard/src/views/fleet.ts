import { api } from '../api';
import type { DeviceList } from '../admin-types';
import { confirmAction, h, table } from '../dom';
import { since, text } from '../format';
import type { View, ViewContext } from '../view';

/** The filters chosen; kept while the page is open, across refreshes and views. */
const filter = { model: '', org: '' };

/** Every device, online or not, with its live state and trust; filtered by model and organization; revoke. */
async function render({ fill, refresh }: ViewContext): Promise<void> {
  const devices = (await api<DeviceList>('GET', '/admin/devices')).data;
  const models = [...new Set(devices.flatMap((d) => d.models))].sort();
  const orgs = [...new Set(devices.map((d) => d.org ?? 'network'))].sort();
  const select = (name: 'model' | 'org', options: string[]) => {
    const el = h(
      'select',
      { name, change: (e) => ((filter[name] = (e.target as HTMLSelectElement).value), void refresh()) },
      h('option', { value: '' }, `any ${name}`),
      ...options.map((o) => h('option', { value: o }, o)),
    );
    el.value = filter[name];
    return el;
  };
  const shown = devices.filter(
    (d) => (!filter.model || d.models.includes(filter.model)) && (!filter.org || (d.org ?? 'network') === filter.org),
  );
  const online = devices.filter((d) => d.online).length;
  const rows = shown.map((d) => [
    d.name,
    d.pool,
    text(d.org),
    d.status === 'revoked' ? h('span', { class: 'error' }, 'revoked') : 'active',
    d.trust.state === 'quarantined'
      ? h('span', { class: 'error', title: d.trust.reason ?? '' }, 'quarantined')
      : d.pool === 'network'
        ? h(
            'span',
            {
              title: `${d.trust.reason ?? ''} (canaries passed ${d.trust.canaries_passed}, failed ${d.trust.canaries_failed})`,
            },
            d.trust.state,
          )
        : '–',
    h('span', { class: d.online ? 'online' : 'offline' }, d.online ? 'online' : 'offline'),
    d.online ? (d.available ? 'yes' : 'no (runtime down)') : '–',
    text(d.models),
    text(d.features),
    text(d.task),
    d.online ? since(d.connected_at) : '–',
    d.status === 'revoked'
      ? ''
      : h(
          'button',
          {
            class: 'danger',
            click: () =>
              void confirmAction(`Revoke device ${d.name}? It is disconnected and its token stops working.`).then(
                async (ok) => ok && (await api('DELETE', `/admin/devices/${d.id}`), await refresh()),
              ),
          },
          'Revoke',
        ),
  ]);
  fill(
    h('p', { 'data-testid': 'fleet-summary' }, `${online} online, ${devices.length - online} offline`),
    h('div', { class: 'filters' }, 'Filter:', select('model', models), select('org', orgs)),
    table(
      [
        'Device',
        'Pool',
        'Org',
        'Status',
        'Trust',
        'Online',
        'Available',
        'Models',
        'Features',
        'Task',
        'Connected for',
        '',
      ],
      rows,
      'fleet-table',
    ),
  );
}

/** Fleet: the devices and their live state. */
export const fleetView: View = { name: 'Fleet', live: true, render };
