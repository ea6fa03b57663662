import type { Command } from 'commander';
import { AppError } from '@app/common/errors/app-error';
import type { ModelKind } from '@app/common/prisma/generated/enums';
import { modelKind, onOff, positiveInt } from '../arguments';
import { adminCall } from '../runner';
import type { Run } from '../runner';

/** `model add|kind|network|digests|list|enable|disable`: the model catalog and its enablement per organization. */
export function addModelCommands(program: Command, run: Run): void {
  const admin = adminCall(run);
  const model = program.command('model').description('the model catalog and its enablement per organization');
  model
    .command('add <model-id>')
    .description('add a model to the catalog')
    .option('--kind <chat|embedding>', 'what it answers: chat (the default) or embedding', modelKind)
    .option('--max-output-tokens <n>', 'upper bound for max_tokens on this model', positiveInt)
    .option('--owned-by <text>', 'owned_by as /v1/models shows it')
    .option('--network', 'let network devices serve it too (default: only the direct devices of its orgs)')
    .action((id: string, opts: { kind?: ModelKind; maxOutputTokens?: number; ownedBy?: string; network?: boolean }) =>
      admin((a) => a.models.add({ id, ...opts })),
    );
  model
    .command('kind')
    .description('set what a model answers: chat (the chat routes) or embedding (the embeddings routes)')
    .argument('<model-id>', 'catalog model')
    .argument('<chat|embedding>', 'chat or embedding', modelKind)
    .action((id: string, kind: ModelKind) => admin((a) => a.models.update(id, { kind })));
  model
    .command('network')
    .description(
      'let network devices serve a model (on), or keep it to the direct devices of its organizations (off, the default)',
    )
    .argument('<model-id>', 'catalog model')
    .argument('<on|off>', 'on or off', onOff)
    .action((id: string, network: boolean) => admin((a) => a.models.update(id, { network })));
  model
    .command('digests')
    .description(
      'pin the digests devices may serve a model with (--allow, repeatable: a device whose runtime reports another, ' +
        'or none, is refused the model), or remove the pin (--clear)',
    )
    .argument('<model-id>', 'catalog model')
    .option('--allow <digest...>', 'a digest devices may serve it with: sha256:<64 hex digits>')
    .option('--clear', 'remove the pin: any device may serve it again')
    .action((id: string, opts: { allow?: string[]; clear?: boolean }) => {
      if (Boolean(opts.clear) === (opts.allow !== undefined)) {
        throw new AppError('invalid_request', 'give either --allow <digest...> or --clear');
      }
      return admin((a) => a.models.update(id, { allowedDigests: opts.clear ? [] : opts.allow }));
    });
  model
    .command('list')
    .description('list the catalog')
    .action(() => admin((a) => a.models.list()));
  model
    .command('enable <model-id>')
    .description('enable a model for an organization')
    .requiredOption('--org <org-name>', 'organization')
    .action((id: string, opts: { org: string }) => admin((a) => a.models.enable(id, opts.org)));
  model
    .command('disable <model-id>')
    .description('disable a model for an organization')
    .requiredOption('--org <org-name>', 'organization')
    .action((id: string, opts: { org: string }) => admin((a) => a.models.disable(id, opts.org)));
}
