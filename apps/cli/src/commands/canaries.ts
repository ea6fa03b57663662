import type { Command } from 'commander';
import { AppError } from '@app/common/errors/app-error';
import { positiveInt } from '../arguments';
import { adminCall } from '../runner';
import type { Run } from '../runner';

/** max_tokens of a canary added without --max-tokens: enough for a short known answer. */
const DEFAULT_MAX_TOKENS = 64;

interface AddOptions {
  prompt?: string;
  system?: string;
  messages?: string;
  maxTokens: number;
  equals?: string;
  contains?: string;
}

/** The chat messages of `canary add`: --prompt (and --system), or --messages as JSON. */
function messagesOf(opts: AddOptions): unknown {
  if ((opts.prompt === undefined) === (opts.messages === undefined)) {
    throw new AppError('invalid_request', 'give either --prompt <text> or --messages <json>', 'messages');
  }
  if (opts.messages !== undefined) {
    if (opts.system !== undefined) {
      throw new AppError('invalid_request', '--system goes with --prompt; put it in --messages instead', 'messages');
    }
    try {
      return JSON.parse(opts.messages);
    } catch {
      throw new AppError('invalid_request', '--messages is not valid JSON', 'messages');
    }
  }
  return [
    ...(opts.system !== undefined ? [{ role: 'system', content: opts.system }] : []),
    { role: 'user', content: opts.prompt },
  ];
}

/** `canary add|list|remove`: prompts with a known answer that check network devices run their model. */
export function addCanaryCommands(program: Command, run: Run): void {
  const admin = adminCall(run);
  const canary = program
    .command('canary')
    .description('canary prompts: a known answer per model, sent to network devices to check they run it');
  canary
    .command('add <model-id>')
    .description('register a canary for a model: the prompt, and the answer (--equals) or part of it (--contains)')
    .option('--prompt <text>', 'the user message')
    .option('--system <text>', 'a system message before it')
    .option('--messages <json>', 'the chat messages as JSON instead: [{"role": "user", "content": "…"}, …]')
    .option(
      '--max-tokens <n>',
      `max_tokens of the canary (default ${DEFAULT_MAX_TOKENS})`,
      positiveInt,
      DEFAULT_MAX_TOKENS,
    )
    .option('--equals <text>', 'the whole answer a device running the model gives at temperature 0')
    .option('--contains <text>', 'text that answer holds')
    .action((model: string, opts: AddOptions) => {
      if ((opts.equals === undefined) === (opts.contains === undefined)) {
        throw new AppError('invalid_request', 'give either --equals <text> or --contains <text>', 'expect');
      }
      const expect = opts.equals !== undefined ? { equals: opts.equals } : { contains: opts.contains };
      const messages = messagesOf(opts);
      return admin((a) => a.canaries.add(model, { messages, max_tokens: opts.maxTokens, expect }));
    });
  canary
    .command('list <model-id>')
    .description('list the canaries of a model')
    .action((model: string) => admin((a) => a.canaries.list(model)));
  canary
    .command('remove <canary-id>')
    .description('remove a canary')
    .action((id: string) => admin((a) => a.canaries.remove(id)));
}
