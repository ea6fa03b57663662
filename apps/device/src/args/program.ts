import { Command, Option } from 'commander';
import type { Feature } from '@app/common/protocol/chat';
import { EMBED_MAX_DIMENSIONS } from '@app/common/protocol/embeddings';
import { BACKEND_NAMES, SIM_DEFAULTS, UPSTREAM_DEFAULTS } from '../backends';
import { AGENT_VERSION } from '../version';
import {
  collectModel,
  collectServers,
  features,
  intervalMs,
  nonNegativeInt,
  positiveInt,
  tokensPerSecond,
  upstreamUrl,
} from './value-parsers';

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/** The options as commander hands them over, before the checks that span options (see parseArgs). */
export interface RawOptions {
  server: string[];
  token?: string;
  tokenFile?: string;
  backend: (typeof BACKEND_NAMES)[number];
  model?: string[];
  upstream?: string;
  apiKey?: string;
  features?: Feature[];
  webSearch: boolean;
  discoveryIntervalMs: number;
  healthIntervalMs: number;
  simTtftMs: number;
  simTokensPerSecond: number;
  simTokens: number;
  simFeatures: Feature[];
  simEmbeddingDimensions: number;
  logLevel: (typeof LOG_LEVELS)[number];
  logContent: boolean;
}

/** Flags of the ollama and openai backends only: given with --backend sim, they are a mistake. */
export const UPSTREAM_FLAGS = [
  '--upstream',
  '--api-key',
  '--features',
  '--discovery-interval-ms',
  '--health-interval-ms',
] as const;

/** The agent's command line: every option, its help, environment variable and default. */
export function buildProgram(): Command {
  return new Command('switchyard-device')
    .description('Switchyard device agent: serves models from a local backend to a Switchyard dispatcher')
    .addOption(
      new Option(
        '--server <url>',
        'dispatcher base URL, e.g. http://127.0.0.1:8081 (repeatable: every dispatcher the device may use; ' +
          'SWITCHYARD_SERVER may list several, comma-separated)',
      )
        .env('SWITCHYARD_SERVER')
        .argParser(collectServers)
        .makeOptionMandatory(),
    )
    .addOption(
      new Option(
        '--token <token>',
        'device token (syd_...), as printed by `switchyard device create`; better in SWITCHYARD_DEVICE_TOKEN or ' +
          '--token-file: other users of the machine see a command line',
      ).env('SWITCHYARD_DEVICE_TOKEN'),
    )
    .addOption(
      new Option('--token-file <path>', 'read the device token from this file (readable by you only: chmod 600)'),
    )
    .addOption(new Option('--backend <name>', 'local runtime to serve from').choices(BACKEND_NAMES).default('sim'))
    .addOption(
      new Option(
        '--model <id>',
        'model served (repeatable): <public-id> or, for ollama/openai, <public-id>=<upstream-name>; ' +
          'without it ollama/openai serve every model the runtime lists (sim needs at least one)',
      ).argParser(collectModel),
    )
    .addOption(
      new Option(
        '--upstream <url>',
        `ollama/openai: the runtime's base URL (ollama: ${UPSTREAM_DEFAULTS.ollamaUrl} by default; openai: e.g. http://127.0.0.1:8000/v1)`,
      )
        .env('SWITCHYARD_UPSTREAM')
        .argParser(upstreamUrl),
    )
    .addOption(
      new Option('--api-key <key>', 'ollama/openai: bearer token sent to the runtime (never logged)').env(
        'SWITCHYARD_UPSTREAM_API_KEY',
      ),
    )
    .addOption(
      new Option(
        '--features <list>',
        "ollama/openai: declare exactly these features instead of the backend's own set (comma-separated, or none)",
      ).argParser(features),
    )
    .option(
      '--web-search',
      'the runtime is set up for web search: declare web_search and pass web_search_options on to it',
      false,
    )
    .addOption(
      new Option('--discovery-interval-ms <n>', 'ollama/openai: how often the model list is read')
        .argParser(intervalMs)
        .default(UPSTREAM_DEFAULTS.discoveryIntervalMs),
    )
    .addOption(
      new Option('--health-interval-ms <n>', 'ollama/openai: how often an unreachable runtime is probed')
        .argParser(intervalMs)
        .default(UPSTREAM_DEFAULTS.healthIntervalMs),
    )
    .addOption(
      new Option('--sim-ttft-ms <n>', 'sim: milliseconds before the first token')
        .argParser(nonNegativeInt)
        .default(SIM_DEFAULTS.ttftMs),
    )
    .addOption(
      new Option('--sim-tokens-per-second <n>', 'sim: pace after the first token (0 = no delay)')
        .argParser(tokensPerSecond)
        .default(SIM_DEFAULTS.tokensPerSecond),
    )
    .addOption(
      new Option('--sim-tokens <n>', 'sim: reply length in tokens')
        .argParser(positiveInt(100_000))
        .default(SIM_DEFAULTS.tokens),
    )
    .addOption(
      new Option('--sim-features <list>', 'sim: comma-separated features to declare, or "none"')
        .argParser(features)
        .default([...SIM_DEFAULTS.features], SIM_DEFAULTS.features.join(',')),
    )
    .addOption(
      new Option(
        '--sim-embedding-dimensions <n>',
        "sim: the length of its vectors (a request's dimensions asks for fewer)",
      )
        .argParser(positiveInt(EMBED_MAX_DIMENSIONS))
        .default(SIM_DEFAULTS.embeddingDimensions),
    )
    .addOption(new Option('--log-level <level>', 'log level').choices(LOG_LEVELS).default('info'))
    .option('--log-content', 'also log prompts and completions (off: logs carry counts and timings only)', false)
    .addHelpText(
      'after',
      '\nExamples:\n' +
        '  export SWITCHYARD_DEVICE_TOKEN=syd_...\n' +
        '  switchyard-device --server http://127.0.0.1:8081 --backend ollama\n' +
        '  switchyard-device --server http://127.0.0.1:8081 --token-file ~/.switchyard-token --backend openai \\\n' +
        '    --upstream http://127.0.0.1:8000/v1 --model bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M=llama-3.2-3b\n' +
        '  switchyard-device --server http://127.0.0.1:8081 --backend sim --model llama3.2:3b\n' +
        '  switchyard-device --server http://10.0.0.1:8081 --server http://10.0.0.2:8081 --backend ollama\n\n' +
        'Exit codes: 0 after SIGINT/SIGTERM (the first lets the current task finish, the second cancels it),\n' +
        '1 when the dispatcher refuses the token, 2 for bad arguments.',
    )
    .version(AGENT_VERSION, '--version', 'print the agent version (what the dispatcher sees in the announce)')
    .showSuggestionAfterError(false)
    .exitOverride();
}
