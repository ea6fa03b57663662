import { redisKeyDocs } from '@app/common/redis/keys';
import { configDefaults } from './config-defaults';
import { markdownTable } from './generated-sections';
import { durationConstants, humanDuration } from './source-constants';

/** Where the code's duration constants are looked for. */
const CODE = ['apps', 'libs/common/src'];

/** A number as the docs write it: 1,000,000, a byte count as 4 MiB, a port as it is. */
function plainNumber(value: number): string {
  if (value >= 1024 && value % 1024 === 0 && Math.log2(value) % 1 === 0) {
    return value >= 1024 * 1024 ? `${value / 1024 / 1024} MiB` : `${value / 1024} KiB`;
  }
  return value >= 10_000 ? value.toLocaleString('en-US') : String(value);
}

/** The settings with numeric defaults (libs/common/src/config/config.ts), for docs/architecture.md. */
export function configTable(root: string): string {
  const rows = configDefaults(root).map((c) => [
    `\`${c.name}\``,
    c.name.endsWith('_MS') ? humanDuration(c.value, 'ms') : plainNumber(c.value),
    c.about,
  ]);
  return markdownTable(['setting', 'default', 'what'], rows);
}

/** Every named duration of the code (`*_MS`, `*_S` constants), for docs/architecture.md. */
export function constantsTable(root: string): string {
  const rows = durationConstants(root, CODE).map((c) => [
    `\`${c.name}\``,
    humanDuration(c.value, c.unit),
    `\`${c.file}\``,
    c.about,
  ]);
  return markdownTable(['constant', 'value', 'file', 'what'], rows);
}

/** A cell's text, its pipes escaped. */
const cell = (text: string) => text.replace(/\|/g, '\\|');

/** Every Redis key and channel, from the catalog of libs/common/src/redis/keys.ts, for docs/architecture.md. */
export function redisKeysTable(): string {
  const rows = redisKeyDocs().map((k) => [
    `\`${cell(k.pattern)}\``,
    k.clusterPattern === k.pattern ? '—' : `\`${cell(k.clusterPattern)}\``,
    k.type,
    cell(k.holds),
    cell(k.lifetime),
  ]);
  return markdownTable(['key', 'on a Redis Cluster', 'type', 'holds', 'lifetime'], rows);
}

/** The fields of each Redis hash that has a codec, for docs/architecture.md. */
export function redisFieldsTables(): string {
  return redisKeyDocs()
    .filter((k) => k.fields)
    .map(
      (k) =>
        `\`${cell(k.pattern)}\` (${cell(k.holds)}):\n\n` +
        markdownTable(
          ['field', 'kind', 'holds'],
          (k.fields ?? []).map((f) => [`\`${f.field}\``, f.kind, cell(f.holds)]),
        ),
    )
    .join('\n\n');
}
