import { randomUUID } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import {
  APP_CONFIG,
  AppError,
  InstanceService,
  batchesOf,
  embedRequirements,
  isTokenInput,
  lineName,
  queueName,
  taskAddress,
} from '@app/common';
import type { AppConfig, EmbedInput, EmbedParams } from '@app/common';
import type { AuthContext } from '../auth/auth-context';
import type { Flight } from '../flight/flight';
import { IntakeService } from '../intake/intake.service';
import { LimitsService } from '../limits/limits.service';
import type { RateHeaders, Slot } from '../limits/limits.service';
import { ModelsService } from '../models/models.service';
import type { EmbedRequest, EmbedResult } from './embed-request';

/** A batch's answer: its vectors in its inputs' order, and the prompt tokens its device reported. */
export interface BatchAnswer {
  vectors: string[];
  promptTokens: number | null;
}

/**
 * The vectors of every batch, in input order. Each batch's device checked its own vectors' length
 * (the dispatcher's EmbedCollector); batches on different devices must agree too: two devices serving
 * one model id with different models (or a dishonest one) would give vectors of different spaces, and
 * the client gets an error rather than a mix.
 */
export function joinBatches(answers: BatchAnswer[]): string[] {
  const vectors = answers.flatMap((a) => a.vectors);
  // The same number of float32s is the same base64 length, and the other way round.
  const lengths = new Set(vectors.map((v) => v.length));
  if (lengths.size > 1) {
    throw new AppError(
      'device_protocol_error',
      'The devices serving this request answered with vectors of different lengths; the request was stopped.',
    );
  }
  return vectors;
}

/** An error the client gets, with the org's rate-limit headers (as every answer of a limited org has). */
function withHeaders(error: unknown, headers: RateHeaders): unknown {
  return error instanceof AppError ? new AppError(error.code, error.message, error.param, headers) : error;
}

/**
 * One slot held by several flights: each gets a part that releases once, and the slot is released
 * when every part has been. A request's batches hold its org's limits together, as one request.
 */
export function sharedSlot(slot: Slot, parts: number): () => Slot {
  let left = parts;
  return () => {
    let released = false;
    return {
      release: () => {
        if (!released) {
          released = true;
          if (--left === 0) {
            slot.release();
          }
        }
      },
    };
  };
}

/**
 * An embeddings request becomes tasks: the checks that do not need the model (caps), the model
 * (an embedding one), the features its inputs need, the pool, the org's limits (taken once: the
 * request counts as one, however many batches it has); then one task per batch of EMBED_BATCH_MAX
 * inputs, queued together so that idle devices serving the model take them in parallel, and their
 * vectors put back in input order. A batch that fails ends the request with its error (the
 * dispatcher has already tried it on another device, see the Finalizer); the other batches are
 * withdrawn.
 */
@Injectable()
export class EmbeddingsService {
  constructor(
    private readonly models: ModelsService,
    private readonly limits: LimitsService,
    private readonly intake: IntakeService,
    private readonly instance: InstanceService,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
  ) {}

  /** The same bound as a chat request's messages: characters of text (or tokens) in all. */
  private checkCaps(input: EmbedInput): void {
    const size = isTokenInput(input)
      ? input.reduce((n, tokens) => n + tokens.length, 0)
      : input.reduce((n, text) => n + text.length, 0);
    if (size > this.config.MAX_INPUT_CHARS) {
      throw new AppError(
        'invalid_request',
        `The input is too long: at most ${this.config.MAX_INPUT_CHARS} characters (or tokens) in all.`,
        'input',
      );
    }
  }

  /**
   * Embeds every input, or throws the error the client gets. `signal` aborts when the client leaves:
   * every batch still queued or running is withdrawn, and the answer is null (nobody takes it).
   * `onBatch` hears each batch's vectors as they come (`first`: the index of its first input), so
   * that the answer can be written while other batches still run.
   */
  async embed(
    caller: AuthContext,
    request: EmbedRequest,
    signal?: AbortSignal,
    onBatch?: (first: number, vectors: string[]) => void,
  ): Promise<{ result: EmbedResult; headers: RateHeaders } | null> {
    this.intake.refuseWhileDraining();
    this.checkCaps(request.input);
    const model = await this.models.forEmbedding(caller.orgId, request.model);
    const options: Omit<EmbedParams, 'input'> = {
      ...(request.dimensions !== undefined ? { dimensions: request.dimensions } : {}),
      ...(request.truncate !== undefined ? { truncate: request.truncate } : {}),
    };
    const needs = embedRequirements({ input: request.input, ...options });
    const route = await this.intake.route(caller, model, request.mode, needs);
    const batches = batchesOf(request.input, this.config.EMBED_BATCH_MAX);
    const ids = batches.map(() => randomUUID());
    const taken = await this.limits.take(caller, model.id, ids[0]);
    const concurrency = sharedSlot(taken.concurrency, batches.length);
    const queued = sharedSlot(taken.queued, batches.length);
    const line = lineName(queueName(model.id, route.pool), caller.orgId);
    const requires = needs.map((r) => r.feature);
    const launched = await Promise.allSettled(
      batches.map((input, i) => {
        const id = ids[i];
        const address = taskAddress(route.mode, id);
        return this.intake.launch(
          caller,
          { taskId: id, address, mode: route.mode, model: model.id, line, api: request.api, resume: false },
          false,
          {
            v: 2,
            kind: 'embed',
            taskId: id,
            taskAddress: address,
            orgId: caller.orgId,
            model: model.id,
            pool: route.pool,
            embed: { input, ...options },
            requires,
            apiInstance: this.instance.id,
            requestId: request.requestId,
          },
          { concurrency: concurrency(), queued: queued(), headers: taken.headers },
        );
      }),
    );
    const flights = launched.flatMap((l) => (l.status === 'fulfilled' ? [l.value] : []));
    const withdraw = () => flights.forEach((f) => void f.abandon());
    const refused = launched.find((l) => l.status === 'rejected');
    if (refused) {
      withdraw();
      throw refused.reason;
    }
    if (signal?.aborted) {
      withdraw();
    }
    signal?.addEventListener('abort', withdraw, { once: true });
    let whole: BatchAnswer[];
    let vectors: string[];
    try {
      const firsts = batches.map((_, i) => batches.slice(0, i).reduce((sum, b) => sum + b.length, 0));
      const answers = await Promise.all(flights.map((f, i) => this.collect(f, firsts[i], onBatch)));
      whole = answers.filter((a): a is BatchAnswer => a !== null);
      if (whole.length < answers.length) {
        return null;
      }
      vectors = joinBatches(whole);
    } catch (error) {
      withdraw();
      throw withHeaders(error, taken.headers);
    } finally {
      signal?.removeEventListener('abort', withdraw);
    }
    const counted = whole.every((a) => a.promptTokens !== null);
    return {
      result: {
        model: model.id,
        mode: route.mode,
        vectors,
        promptTokens: counted ? whole.reduce((n, a) => n + a.promptTokens!, 0) : null,
        taskAddresses: flights.map((f) => f.task.address),
      },
      headers: taken.headers,
    };
  }

  /** A batch's vectors, in its inputs' order, once its task is done; throws its error; null once the client left. */
  private async collect(
    flight: Flight,
    first: number,
    onBatch?: (first: number, vectors: string[]) => void,
  ): Promise<BatchAnswer | null> {
    const vectors: string[] = [];
    for await (const event of flight.events()) {
      switch (event.type) {
        case 'embedding':
          for (const v of event.data) {
            vectors[v.index] = v.embedding;
          }
          break;
        case 'done':
          onBatch?.(first, vectors);
          return { vectors, promptTokens: event.usage?.prompt_tokens ?? null };
        case 'error':
          throw new AppError(event.code, event.message);
        case 'assigned':
        case 'requeued':
        case 'resumed':
        case 'delta':
          // The batch waits or runs; a chat delta never comes for an embedding task.
          break;
      }
    }
    return null;
  }
}
