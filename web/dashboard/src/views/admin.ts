import { api } from '../api';
import type { KeyList, ModelList, OrgList } from '../admin-types';
import { confirmAction, h, table } from '../dom';
import { text } from '../format';
import type { View, ViewContext } from '../view';

/** The organization chosen (the first one until then); kept while the page is open. */
let adminOrg = '';

/** One organization's API keys (revoke) and the catalog's models (enable, disable for it). */
async function render({ fill, refresh }: ViewContext): Promise<void> {
  const orgs = (await api<OrgList>('GET', '/admin/orgs')).data;
  adminOrg ||= orgs[0]?.name ?? '';
  const picker = h(
    'select',
    { name: 'org', change: (e) => ((adminOrg = (e.target as HTMLSelectElement).value), void refresh()) },
    ...orgs.map((o) => h('option', { value: o.name }, o.name)),
  );
  picker.value = adminOrg;
  if (!adminOrg) {
    fill(h('p', { class: 'muted' }, 'No organization yet.'));
    return;
  }
  const [keys, models] = await Promise.all([
    api<KeyList>('GET', `/admin/orgs/${encodeURIComponent(adminOrg)}/keys`),
    api<ModelList>('GET', '/admin/models'),
  ]);
  const act = (message: string, method: string, path: string) => () =>
    void confirmAction(message).then(async (ok) => ok && (await api(method, path), await refresh()));
  fill(
    h('div', { class: 'form' }, 'Organization', picker),
    h('h3', {}, 'API keys'),
    table(
      ['Prefix', 'Label', 'Status', 'Last used', ''],
      keys.data.map((k) => [
        k.prefix,
        text(k.label),
        k.status,
        text(k.last_used_at),
        k.status === 'active'
          ? h(
              'button',
              {
                class: 'danger',
                click: act(`Revoke key ${k.prefix}… of ${adminOrg}?`, 'DELETE', `/admin/keys/${k.id}`),
              },
              'Revoke',
            )
          : '',
      ]),
      'keys-table',
    ),
    h('h3', {}, 'Models'),
    table(
      ['Model', `Enabled for ${adminOrg}`, ''],
      models.data.map((m) => {
        const enabled = m.enabled_for.includes(adminOrg);
        const path = `/admin/orgs/${encodeURIComponent(adminOrg)}/models/${encodeURIComponent(m.id)}`;
        return [
          m.id,
          enabled ? 'yes' : 'no',
          h(
            'button',
            {
              click: act(
                `${enabled ? 'Disable' : 'Enable'} ${m.id} for ${adminOrg}?`,
                enabled ? 'DELETE' : 'PUT',
                path,
              ),
            },
            enabled ? 'Disable' : 'Enable',
          ),
        ];
      }),
      'models-table',
    ),
  );
}

/** Admin: keys and model enablement of one organization. */
export const adminView: View = { name: 'Admin', live: false, render };
