import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { looksLikeDeviceToken } from '@app/common/keys/keys';
import type { Feature } from '@app/common/protocol/chat';
import { FEATURES } from '@app/common/protocol/chat';
import type { BackendConfig, ModelMapping } from './backends';
import { BACKEND_NAMES, SIM_DEFAULTS, UPSTREAM_DEFAULTS } from './backends';

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/** The agent's configuration, parsed and validated once at start. */
export interface DeviceOptions {
  /** Dispatcher base URL without a trailing slash, e.g. http://127.0.0.1:8081. */
  server: string;
  token: string;
  backend: BackendConfig;
  logLevel: (typeof LOG_LEVELS)[number];
  logContent: boolean;
}

export type ParseResult = { ok: true; options: DeviceOptions } | { ok: false; exitCode: number };

/** Usage errors exit 2, as most command-line tools do, so scripts can tell them from a refused token (1). */
export const USAGE_EXIT_CODE = 2;

/** The announce schema bounds model ids to 200 characters and 1000 per device. */
const MAX_MODEL_ID = 200;
const MAX_MODELS = 1000;

const nonNegativeInt = (value: string) => {
  if (!/^[0-9]+$/.test(value) || Number(value) > 3_600_000) {
    throw new InvalidArgumentError('must be a whole number from 0 to 3600000');
  }
  return Number(value);
};

const positiveInt = (max: number) => (value: string) => {
  if (!/^[1-9][0-9]*$/.test(value) || Number(value) > max) {
    throw new InvalidArgumentError(`must be a whole number from 1 to ${max}`);
  }
  return Number(value);
};

const tokensPerSecond = (value: string) => {
  const n = Number(value);
  if (!/^[0-9]+(\.[0-9]+)?$/.test(value) || n > 1_000_000) {
    throw new InvalidArgumentError('must be a number from 0 to 1000000 (0 = no delay between tokens)');
  }
  return n;
};

const features = (value: string): Feature[] => {
  const names = value
    .split(',')
    .map((f) => f.trim())
    .filter((f) => f.length > 0 && f !== 'none');
  for (const name of names) {
    if (!(FEATURES as readonly string[]).includes(name)) {
      throw new InvalidArgumentError(`unknown feature "${name}"; known: ${FEATURES.join(', ')} (or none)`);
    }
  }
  return [...new Set(names)] as Feature[];
};

const collectModel = (value: string, previous: string[] | undefined) => {
  if (value.trim() !== value || value.length === 0 || value.length > MAX_MODEL_ID) {
    throw new InvalidArgumentError(`must be a model id of 1 to ${MAX_MODEL_ID} characters without surrounding spaces`);
  }
  return [...(previous ?? []), value];
};

/** Discovery and health intervals: at least 100 ms (tests go fast), at most an hour. */
const intervalMs = (value: string) => {
  if (!/^[0-9]+$/.test(value) || Number(value) < 100 || Number(value) > 3_600_000) {
    throw new InvalidArgumentError('must be a whole number of milliseconds from 100 to 3600000');
  }
  return Number(value);
};

/** A runtime's base URL, kept with its path (an OpenAI-compatible server's usually ends in /v1). */
const upstreamUrl = (value: string) => {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError('must be a URL such as http://127.0.0.1:11434 or http://127.0.0.1:8000/v1');
  }
  if (!['http:', 'https:'].includes(url.protocol)) {
    throw new InvalidArgumentError('must start with http:// or https://');
  }
  if (url.search || url.hash) {
    throw new InvalidArgumentError('must not have a query string or fragment');
  }
  return url.href.replace(/\/+$/, '');
};

/**
 * `--model <public-id>=<upstream-name>` for the runtimes: the catalog's name on the left, the
 * runtime's on the right (split at the first `=`); a plain `--model x` is the same name on both sides.
 */
export function parseModelMapping(value: string): ModelMapping {
  const at = value.indexOf('=');
  const mapping =
    at < 0 ? { public: value, upstream: value } : { public: value.slice(0, at), upstream: value.slice(at + 1) };
  for (const [side, name] of [
    ['public id', mapping.public],
    ['upstream name', mapping.upstream],
  ] as const) {
    if (name.trim() !== name || name.length === 0 || name.length > MAX_MODEL_ID) {
      throw new InvalidArgumentError(
        `"${value}": the ${side} must be 1 to ${MAX_MODEL_ID} characters without surrounding spaces`,
      );
    }
  }
  return mapping;
}

/** socket.io takes the URL's path as the namespace, so only a bare origin is accepted and `/devices` is added by the agent. */
const serverUrl = (value: string) => {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError('must be a URL such as http://127.0.0.1:8081');
  }
  if (!['http:', 'https:', 'ws:', 'wss:'].includes(url.protocol)) {
    throw new InvalidArgumentError('must start with http://, https://, ws:// or wss://');
  }
  if ((url.pathname !== '/' && url.pathname !== '') || url.search || url.hash) {
    throw new InvalidArgumentError("must be the dispatcher's base URL without a path, such as http://127.0.0.1:8081");
  }
  return url.origin;
};

function buildProgram(): Command {
  return new Command('switchyard-device')
    .description('Switchyard device agent: serves models from a local backend to a Switchyard dispatcher')
    .addOption(
      new Option('--server <url>', 'dispatcher base URL, e.g. http://127.0.0.1:8081')
        .env('SWITCHYARD_SERVER')
        .argParser(serverUrl)
        .makeOptionMandatory(),
    )
    .addOption(
      new Option('--token <token>', 'device token (syd_...), as printed by `switchyard device create`')
        .env('SWITCHYARD_DEVICE_TOKEN')
        .makeOptionMandatory(),
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
        .default([...SIM_DEFAULTS.features], FEATURES.join(',')),
    )
    .addOption(new Option('--log-level <level>', 'log level').choices(LOG_LEVELS).default('info'))
    .option('--log-content', 'also log prompts and completions (off: logs carry counts and timings only)', false)
    .addHelpText(
      'after',
      '\nExamples:\n' +
        '  switchyard-device --server http://127.0.0.1:8081 --token syd_... --backend ollama\n' +
        '  switchyard-device --server http://127.0.0.1:8081 --token syd_... --backend openai \\\n' +
        '    --upstream http://127.0.0.1:8000/v1 --model bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M=llama-3.2-3b\n' +
        '  switchyard-device --server http://127.0.0.1:8081 --token syd_... --backend sim --model llama3.2:3b\n\n' +
        'Exit codes: 0 after SIGINT/SIGTERM (the first lets the current task finish, the second cancels it),\n' +
        '1 when the dispatcher refuses the token, 2 for bad arguments.',
    )
    .showSuggestionAfterError(false)
    .exitOverride();
}

interface RawOptions {
  server: string;
  token: string;
  backend: (typeof BACKEND_NAMES)[number];
  model?: string[];
  upstream?: string;
  apiKey?: string;
  features?: Feature[];
  discoveryIntervalMs: number;
  healthIntervalMs: number;
  simTtftMs: number;
  simTokensPerSecond: number;
  simTokens: number;
  simFeatures: Feature[];
  logLevel: (typeof LOG_LEVELS)[number];
  logContent: boolean;
}

/**
 * Parses the command line (and SWITCHYARD_SERVER / SWITCHYARD_DEVICE_TOKEN). On a usage error commander
 * has already written one `error: ...` line to stderr; help and version exit 0.
 */
export function parseArgs(
  argv: string[],
  output?: { writeOut(s: string): void; writeErr(s: string): void },
): ParseResult {
  // Typed explicitly so that TypeScript knows program.error() does not return.
  const program: Command = buildProgram();
  if (output) {
    program.configureOutput(output);
  }
  try {
    program.parse(argv);
    const raw = program.opts<RawOptions>();
    if (!looksLikeDeviceToken(raw.token)) {
      // The value is not echoed: a mistyped token is still close to a secret.
      program.error('error: --token must be a device token: syd_ followed by 32 to 128 letters and digits');
    }
    const models = [...new Set(raw.model ?? [])];
    if (models.length > MAX_MODELS) {
      program.error(`error: at most ${MAX_MODELS} --model options`);
    }
    // Only flags on the command line are mistakes; an environment variable may be set for another backend.
    const given = (prefix: string) =>
      program.options.find(
        (o) => o.long?.startsWith(prefix) && program.getOptionValueSource(o.attributeName()) === 'cli',
      );
    const common = { server: raw.server, token: raw.token, logLevel: raw.logLevel, logContent: raw.logContent };
    if (raw.backend === 'sim') {
      const upstreamFlag = ['--upstream', '--api-key', '--features', '--discovery-interval-ms', '--health-interval-ms']
        .map((flag) => given(flag))
        .find((o) => o !== undefined);
      if (upstreamFlag) {
        program.error(`error: ${upstreamFlag.long} applies only to --backend ollama and openai`);
      }
      if (models.length === 0) {
        program.error('error: --backend sim needs at least one --model <id> to serve');
      }
      return {
        ok: true,
        options: {
          ...common,
          backend: {
            name: 'sim',
            options: {
              models,
              ttftMs: raw.simTtftMs,
              tokensPerSecond: raw.simTokensPerSecond,
              tokens: raw.simTokens,
              features: raw.simFeatures,
            },
          },
        },
      };
    }
    const simFlag = given('--sim-');
    if (simFlag) {
      program.error(`error: ${simFlag.long} applies only to --backend sim`);
    }
    const upstream = raw.upstream ?? (raw.backend === 'ollama' ? UPSTREAM_DEFAULTS.ollamaUrl : undefined);
    if (!upstream) {
      program.error(
        "error: --backend openai needs --upstream <url>, the server's base URL such as http://127.0.0.1:8000/v1",
      );
    }
    const mappings: ModelMapping[] = [];
    for (const value of models) {
      let mapping: ModelMapping;
      try {
        mapping = parseModelMapping(value);
      } catch (error) {
        program.error(`error: option '--model <id>' argument is invalid. ${(error as Error).message}`);
      }
      const other = mappings.find((m) => m.public === mapping.public);
      if (other) {
        program.error(
          `error: --model ${mapping.public} is mapped twice (to ${other.upstream} and ${mapping.upstream})`,
        );
      }
      mappings.push(mapping);
    }
    return {
      ok: true,
      options: {
        ...common,
        backend: {
          name: raw.backend,
          options: {
            upstream,
            models: mappings,
            ...(raw.apiKey ? { apiKey: raw.apiKey } : {}),
            ...(raw.features ? { features: raw.features } : {}),
            discoveryIntervalMs: raw.discoveryIntervalMs,
            healthIntervalMs: raw.healthIntervalMs,
          },
        },
      },
    };
  } catch (error) {
    if (error instanceof CommanderError) {
      return { ok: false, exitCode: error.exitCode === 0 ? 0 : USAGE_EXIT_CODE };
    }
    throw error;
  }
}
