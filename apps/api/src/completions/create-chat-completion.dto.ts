import { AppError } from '@app/common';
import type { ChatMessage, ChatParams, ToolDefinition } from '@app/common';
import { DEFAULT_MAX_TOKENS } from '../common/chat-defaults';
import { paramPath } from '../common/validation';
import { REJECTED, dropNulls, ignoredParams } from './chat-completion.fields';
import { chatCompletionSchema } from './chat-completion.schema';
import type { ChatCompletionBody, FunctionDef, MessageBody } from './chat-completion.schema';

export { ignoredParams } from './chat-completion.fields';

export interface ChatCompletionRequest {
  /** The model as the client named it (echoed in responses). */
  model: string;
  mode: 'auto' | 'direct' | 'network';
  stream: boolean;
  includeUsage: boolean;
  /** Open the stream at once and report the queue position every second until the first token. */
  includeQueueStatus: boolean;
  /** Before clamping to the model's max output tokens. */
  params: ChatParams;
  ignored: string[];
}

export interface ParseOptions {
  /** The OpenGPU relay's vLLM route serves direct mode only: another mode is refused, none means direct. */
  directOnly?: boolean;
}

const unsupported = (param: string, message: string) => new AppError('unsupported_parameter', message, param);

function text(value: string | { text: string }[] | null | undefined): string | null {
  if (value == null) {
    return null;
  }
  return typeof value === 'string' ? value : value.map((p) => p.text).join('');
}

/** Image, audio and file parts are refused before schema validation, with their own code. */
function checkContentParts(messages: unknown): void {
  if (!Array.isArray(messages)) {
    return;
  }
  messages.forEach((m: unknown, i) => {
    const parts = (m as { content?: unknown } | null)?.content;
    if (!Array.isArray(parts)) {
      return;
    }
    parts.forEach((part: unknown, j) => {
      const type = (part as { type?: unknown } | null)?.type;
      if (typeof type === 'string' && type !== 'text') {
        throw new AppError(
          'unsupported_content_part',
          `Content parts of type '${type}' are not supported: devices serve text only.`,
          `messages[${i}].content[${j}]`,
        );
      }
    });
  });
}

/** The rules that span fields, once the schema holds. */
function checkCombinations(b: ChatCompletionBody): void {
  if (b.tool_choice !== undefined && b.tool_choice !== 'auto' && b.tool_choice !== 'none') {
    throw unsupported('tool_choice', "Only tool_choice 'auto' and 'none' are supported.");
  }
  if (b.function_call !== undefined && typeof b.function_call !== 'string') {
    throw unsupported('function_call', "Only function_call 'auto' and 'none' are supported.");
  }
  if (b.stream_options && !b.stream) {
    throw new AppError('invalid_request', "'stream_options' is only allowed when 'stream' is true.", 'stream_options');
  }
  if (b.top_logprobs !== undefined && !b.logprobs) {
    throw new AppError('invalid_request', "'top_logprobs' requires 'logprobs' to be true.", 'top_logprobs');
  }
  if (b.tools && b.functions) {
    throw new AppError('invalid_request', "Send either 'tools' or the deprecated 'functions', not both.", 'functions');
  }
}

function toMessage(m: MessageBody): ChatMessage {
  switch (m.role) {
    case 'system':
    case 'developer':
      return { role: 'system', content: text(m.content), ...(m.name ? { name: m.name } : {}) };
    case 'user':
      return { role: 'user', content: text(m.content), ...(m.name ? { name: m.name } : {}) };
    case 'assistant': {
      const calls =
        m.tool_calls ??
        (m.function_call
          ? [{ id: m.function_call.name, type: 'function' as const, function: m.function_call }]
          : undefined);
      return { role: 'assistant', content: text(m.content), ...(calls ? { tool_calls: calls } : {}) };
    }
    case 'tool':
      return { role: 'tool', content: text(m.content), tool_call_id: m.tool_call_id };
    case 'function':
      // The deprecated function result becomes a tool result answering the call named after it.
      return { role: 'tool', content: text(m.content), tool_call_id: m.name, name: m.name };
  }
}

function stripNullish(value: FunctionDef): ToolDefinition['function'] {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v != null)) as ToolDefinition['function'];
}

/** What a device receives for a validated body. */
function toParams(b: ChatCompletionBody): ChatParams {
  const tools: ToolDefinition[] | undefined =
    b.tools?.map((t) => ({ type: 'function', function: stripNullish(t.function) })) ??
    b.functions?.map((f) => ({ type: 'function', function: stripNullish(f) }));
  // checkCombinations has refused every other choice.
  const toolChoice = (b.tool_choice ?? b.function_call) as ChatParams['tool_choice'];
  const stop = b.stop === undefined ? undefined : typeof b.stop === 'string' ? [b.stop] : b.stop;
  return {
    messages: b.messages.map(toMessage),
    max_tokens: b.max_completion_tokens ?? b.max_tokens ?? DEFAULT_MAX_TOKENS,
    ...(b.temperature !== undefined ? { temperature: b.temperature } : {}),
    ...(b.top_p !== undefined ? { top_p: b.top_p } : {}),
    ...(stop !== undefined ? { stop } : {}),
    // Only meaningful with stop strings; without them nothing is sent.
    ...(stop !== undefined && b.include_stop_str_in_output ? { include_stop_str_in_output: true } : {}),
    ...(b.frequency_penalty !== undefined ? { frequency_penalty: b.frequency_penalty } : {}),
    ...(b.presence_penalty !== undefined ? { presence_penalty: b.presence_penalty } : {}),
    ...(b.n !== undefined ? { n: b.n } : {}),
    ...(b.response_format ? { response_format: b.response_format as ChatParams['response_format'] } : {}),
    ...(tools?.length ? { tools } : {}),
    ...(toolChoice !== undefined ? { tool_choice: toolChoice } : {}),
    ...(b.logprobs ? { logprobs: true, top_logprobs: b.top_logprobs ?? 0 } : {}),
    ...(b.logit_bias && Object.keys(b.logit_bias).length ? { logit_bias: b.logit_bias } : {}),
    ...(b.reasoning_effort ? { reasoning_effort: b.reasoning_effort } : {}),
    ...(b.web_search_options ? { web_search_options: b.web_search_options } : {}),
  };
}

/** The mode asked for, `opengpu` read as `network`; on the direct-only route, anything but direct is refused. */
function modeOf(mode: ChatCompletionBody['mode'], options: ParseOptions): ChatCompletionRequest['mode'] {
  if (options.directOnly) {
    if (mode !== undefined && mode !== 'direct') {
      throw new AppError(
        'invalid_request',
        `This route serves direct mode only: send 'mode': 'direct' or no mode, or use /v1/chat/completions for '${mode}'.`,
        'mode',
      );
    }
    return 'direct';
  }
  return mode === 'opengpu' ? 'network' : (mode ?? 'auto');
}

/**
 * Validates an OpenAI chat completion request and turns it into what a device receives. Every
 * refusal is a 400 naming the param; nothing is written before this passes.
 */
export function parseChatCompletion(
  raw: unknown,
  defaultModel: string | undefined,
  options: ParseOptions = {},
): ChatCompletionRequest {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new AppError('invalid_request', 'The request body must be a JSON object.');
  }
  const body = dropNulls(raw as Record<string, unknown>);
  for (const param of REJECTED) {
    if (param in body) {
      throw unsupported(param, `'${param}' is not supported by Switchyard.`);
    }
  }
  if (body.parallel_tool_calls === false) {
    throw unsupported('parallel_tool_calls', "'parallel_tool_calls: false' is not supported by Switchyard.");
  }
  checkContentParts(body.messages);
  const parsed = chatCompletionSchema.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const param = paramPath(issue.path);
    throw new AppError('invalid_request', param ? `Invalid '${param}': ${issue.message}` : issue.message, param);
  }
  const b = parsed.data;
  const model = b.model ?? defaultModel;
  if (!model) {
    throw new AppError('model_required', "You must provide a model parameter ('model').", 'model');
  }
  checkCombinations(b);
  const mode = modeOf(b.mode, options);
  const includeUsage = Boolean(b.stream && b.stream_options?.include_usage);
  const includeQueueStatus = Boolean(b.stream && b.stream_options?.include_queue_status);
  return {
    model,
    mode,
    stream: b.stream ?? false,
    includeUsage,
    includeQueueStatus,
    params: toParams(b),
    ignored: ignoredParams(body),
  };
}
