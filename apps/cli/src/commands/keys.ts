import type { Command } from 'commander';
import { NO_BUDGET, tokenBudget } from '../arguments';
import { adminCall } from '../runner';
import type { Run } from '../runner';

const SHOWN_ONCE = 'Store this key now: it is not shown again.';

/** `key create|list|revoke|rotate|budget`: API keys of an organization. */
export function addKeyCommands(program: Command, run: Run): void {
  const admin = adminCall(run);
  const key = program.command('key').description('API keys of an organization');
  key
    .command('create')
    .description('create an API key; it is printed this once and never again')
    .requiredOption('--org <org-name>', 'organization that owns the key')
    .option('--label <text>', 'a note to tell keys apart')
    .option('--expires-in <duration>', 'lifetime such as 90s, 45m, 12h or 30d')
    .action((opts: { org: string; label?: string; expiresIn?: string }) =>
      admin((a) => a.keys.create(opts), { note: SHOWN_ONCE }),
    );
  key
    .command('list')
    .description("list an organization's keys (prefixes only)")
    .requiredOption('--org <org-name>', 'organization')
    .action((opts: { org: string }) => admin((a) => a.keys.list(opts.org)));
  key
    .command('revoke <key-id>')
    .description('revoke a key (takes effect within a second)')
    .action((id: string) => admin((a) => a.keys.revoke(id)));
  key
    .command('rotate <key-id>')
    .description('replace a key: prints a new key once; the old one keeps working for the grace, then expires')
    .option('--grace <duration>', 'how long the old key keeps working: 0 (at once), 90s, 45m, 12h, 30d', '24h')
    .action((id: string, opts: { grace: string }) =>
      admin((a) => a.keys.rotate(id, { grace: opts.grace }), { note: SHOWN_ONCE }),
    );
  key
    .command('budget')
    .description("set a key's own monthly token budget, within its organization's (a rotated key's successor keeps it)")
    .argument('<key-id>', 'the key')
    .argument('<tokens|none>', 'tokens (prompt and completion), or none to remove the budget', tokenBudget)
    .action((id: string, tokens: number) => admin((a) => a.keys.setBudget(id, tokens === NO_BUDGET ? null : tokens)));
}
