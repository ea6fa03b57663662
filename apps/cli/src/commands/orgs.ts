import type { Command } from 'commander';
import type { OrgCompat } from '@app/common/prisma/generated/enums';
import { NO_BUDGET, onOff, orgCompat, positiveInt, tokenBudget } from '../arguments';
import { adminCall } from '../runner';
import type { Run } from '../runner';

// commander keeps a parsed null as '', so `none` is carried as 0 and turned into null below.
const limit = (value: string) => (value === 'none' || value === '0' ? 0 : positiveInt(value));
const orNull = (value: number | undefined) => (value === 0 ? null : value);

/** `org create|list|limits|network|resume|compat|weight|budget`: organizations (tenants). */
export function addOrgCommands(program: Command, run: Run): void {
  const admin = adminCall(run);
  const org = program.command('org').description('organizations (tenants)');
  org
    .command('create <name>')
    .description('create an organization')
    .action((name: string) => admin((a) => a.orgs.create(name)));
  org
    .command('list')
    .description('list organizations')
    .action(() => admin((a) => a.orgs.list()));
  org
    .command('limits <name>')
    .description('set limits of an organization (a number, or none to remove a limit); no option shows them')
    .option('--rpm <n|none>', 'requests per minute', limit)
    .option('--concurrency <n|none>', 'requests at once', limit)
    .option('--max-queued <n|none>', 'queued requests per model', limit)
    .action((name: string, opts: { rpm?: number; concurrency?: number; maxQueued?: number }) =>
      admin((a) =>
        a.orgs.setLimits(name, {
          rpm: orNull(opts.rpm),
          concurrency: orNull(opts.concurrency),
          maxQueued: orNull(opts.maxQueued),
        }),
      ),
    );
  org
    .command('network')
    .description('let the organization use the shared network (on, the default) or keep its prompts off it (off)')
    .argument('<name>', 'organization')
    .argument('<on|off>', 'on or off', onOff)
    .action((name: string, network: boolean) => admin((a) => a.orgs.setLimits(name, { network })));
  org
    .command('resume')
    .description(
      'let a streamed answer whose device is lost after output reached the client continue on another device ' +
        '(on, the default), or keep one device per answer (off: such a task ends with device_disconnected)',
    )
    .argument('<name>', 'organization')
    .argument('<on|off>', 'on or off', onOff)
    .action((name: string, resume: boolean) => admin((a) => a.orgs.setLimits(name, { resume })));
  org
    .command('compat')
    .description(
      'choose which rules the OpenAI routes follow where OpenAI and the Nodea specification differ: openai ' +
        '(the default) or nodea (the stop text included in the output; with n > 1, usage counts one choice)',
    )
    .argument('<name>', 'organization')
    .argument('<openai|nodea>', 'openai or nodea', orgCompat)
    .action((name: string, compat: OrgCompat) => admin((a) => a.orgs.setLimits(name, { compat })));
  org
    .command('weight')
    .description("set the organization's share of a queue when several organizations wait")
    .argument('<name>', 'organization')
    .argument('<n>', 'weight, 1 to 100 (default 1)', positiveInt)
    .action((name: string, weight: number) => admin((a) => a.orgs.setLimits(name, { weight })));
  org
    .command('budget')
    .description(
      "set the organization's monthly token budget: the most tokens its requests may use in a calendar month " +
        '(UTC); over it, requests get 429 insufficient_quota until the month ends',
    )
    .argument('<name>', 'organization')
    .argument('<tokens|none>', 'tokens (prompt and completion), or none to remove the budget', tokenBudget)
    .action((name: string, tokens: number) =>
      admin((a) => a.orgs.setLimits(name, { monthlyTokenBudget: tokens === NO_BUDGET ? null : tokens })),
    );
}
