import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { looksLikeDeviceToken } from '@app/common/keys/keys';
import type { Feature } from '@app/common/protocol/chat';
import { FEATURES } from '@app/common/protocol/chat';
import type { BackendConfig } from './backends';
import { BACKEND_NAMES, SIM_DEFAULTS } from './backends';

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
      new Option('--model <id>', 'public model id this device serves (repeatable; sim needs at least one)').argParser(
        collectModel,
      ),
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
      '\nExample:\n  switchyard-device --server http://127.0.0.1:8081 --token syd_... --backend sim --model llama3.2:3b\n\n' +
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
  const program = buildProgram();
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
    if (raw.backend !== 'sim') {
      const simFlag = program.options.find(
        (o) => o.long?.startsWith('--sim-') && program.getOptionValueSource(o.attributeName()) === 'cli',
      );
      if (simFlag) {
        program.error(`error: ${simFlag.long} applies only to --backend sim`);
      }
    }
    if (models.length === 0) {
      program.error('error: --backend sim needs at least one --model <id> to serve');
    }
    return {
      ok: true,
      options: {
        server: raw.server,
        token: raw.token,
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
        logLevel: raw.logLevel,
        logContent: raw.logContent,
      },
    };
  } catch (error) {
    if (error instanceof CommanderError) {
      return { ok: false, exitCode: error.exitCode === 0 ? 0 : USAGE_EXIT_CODE };
    }
    throw error;
  }
}
