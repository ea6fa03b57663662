import { randomUUID } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import {
  APP_CONFIG,
  AppError,
  LOGGER,
  RequestTraces,
  budgetScope,
  lineName,
  queueName,
  requirements,
  taskAddress,
  taskDeadline,
  traceIdOf,
  InstanceService,
} from '@app/common';
import type { AppConfig, ChatParams, JobData, Logger, Requirement } from '@app/common';
import type { AuthContext } from '../auth/auth-context';
import type { Flight, FlightTask } from '../flight/flight';
import { FlightsService } from '../flight/flights.service';
import { LimitsService } from '../limits/limits.service';
import type { RateHeaders, Slot } from '../limits/limits.service';
import { ModelsService } from '../models/models.service';
import type { ModelRow } from '../models/models.service';
import { JobQueue } from '../queue/job-queue.service';
import { PresenceService } from './presence.service';
import type { Route, RouteRequest } from './presence.service';

/** A chat request as both wire formats hand it over, validated. */
export interface ChatRequest {
  model: string;
  mode: 'auto' | 'direct' | 'network';
  params: ChatParams;
  includeUsage: boolean;
  api: 'openai' | 'ollama';
  stream: boolean;
  requestId: string;
}

/**
 * A request becomes a task: the checks that do not need the model (caps), the model, the features
 * the request needs, the pool it goes to, the org's limits; then its flight and its job. Every check
 * is answered from memory when it can (keys, models and presence are cached), so that a request of
 * an org without limits reaches Redis once, with its job.
 */
@Injectable()
export class IntakeService {
  constructor(
    private readonly models: ModelsService,
    private readonly presence: PresenceService,
    private readonly limits: LimitsService,
    private readonly flights: FlightsService,
    private readonly queue: JobQueue,
    private readonly instance: InstanceService,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  private checkCaps(params: ChatParams): void {
    if (params.messages.length > this.config.MAX_MESSAGES) {
      throw new AppError(
        'invalid_request',
        `Too many messages: at most ${this.config.MAX_MESSAGES} per request.`,
        'messages',
      );
    }
    const chars = params.messages.reduce((n, m) => n + (m.content?.length ?? 0), 0);
    if (chars > this.config.MAX_INPUT_CHARS) {
      throw new AppError(
        'invalid_request',
        `The messages are too long: at most ${this.config.MAX_INPUT_CHARS} characters in all.`,
        'messages',
      );
    }
  }

  /**
   * Whether the task may continue on another device if its device is lost after output reached the
   * client (docs/api.md, "Resume"): the organization allows it, and the answer is one a device can
   * continue from its text: one choice, and no json_schema (a runtime's schema-constrained decoding
   * cannot start in the middle of a document).
   */
  private resumable(caller: AuthContext, params: ChatParams): boolean {
    return (
      caller.resume &&
      this.config.RESUME_MAX_ATTEMPTS > 0 &&
      (params.n ?? 1) === 1 &&
      params.response_format?.type !== 'json_schema'
    );
  }

  /** A request that comes while the api drains is refused, before anything is looked up for it. */
  refuseWhileDraining(): void {
    if (this.flights.isDraining) {
      throw new AppError('server_shutdown', 'This server is shutting down. Retry the request.');
    }
  }

  /**
   * The pool a request for `model` that needs `requires` goes to (presence, see PresenceService), or the
   * error the client gets: chat requests and embedding batches route alike.
   */
  route(caller: AuthContext, model: ModelRow, mode: RouteRequest['mode'], requires: Requirement[]): Promise<Route> {
    return this.presence.route({
      orgId: caller.orgId,
      model: model.id,
      mode,
      requires,
      networkAllowed: caller.network,
      modelOnNetwork: model.network,
    });
  }

  /** Starts a task, or throws the error the client gets. */
  async start(caller: AuthContext, request: ChatRequest): Promise<{ flight: Flight; headers: RateHeaders }> {
    this.refuseWhileDraining();
    this.checkCaps(request.params);
    const model = await this.models.forChat(caller.orgId, request.model);
    const params: ChatParams = {
      ...request.params,
      // The Nodea specification's stop rule, for an organization that follows it (docs/api.md, "Compatibility").
      ...(caller.compat === 'nodea' && request.api === 'openai' && request.params.stop?.length
        ? { include_stop_str_in_output: true }
        : {}),
      max_tokens:
        model.maxOutputTokens !== null
          ? Math.min(request.params.max_tokens, model.maxOutputTokens)
          : request.params.max_tokens,
    };
    const needs = requirements(params, request.includeUsage);
    const requires = needs.map((r) => r.feature);
    const route = await this.route(caller, model, request.mode, needs);
    const id = randomUUID();
    const taken = await this.limits.take(caller, model.id, id);
    const address = taskAddress(route.mode, id);
    const line = lineName(queueName(model.id, route.pool), caller.orgId);
    const resume = this.resumable(caller, params);
    const flight = await this.launch(
      caller,
      { taskId: id, address, mode: route.mode, model: model.id, line, api: request.api, resume },
      request.stream,
      {
        v: 2,
        taskId: id,
        taskAddress: address,
        orgId: caller.orgId,
        model: model.id,
        pool: route.pool,
        params,
        requires,
        apiInstance: this.instance.id,
        requestId: request.requestId,
        stream: request.stream,
        resume,
      },
      taken,
    );
    return { flight, headers: taken.headers };
  }

  /**
   * Opens a task's flight and puts its job in its line (the task record with it); on a failed
   * enqueue, the flight fails and the client's error is thrown. The caller took the org's limits
   * (`taken`: the slots the flight holds, the headers its answer carries).
   */
  async launch(
    caller: AuthContext,
    task: FlightTask,
    stream: boolean,
    data: JobData,
    taken: { concurrency: Slot; queued: Slot; headers: RateHeaders },
  ): Promise<Flight> {
    const flight = this.flights.open(task, taken);
    // The request's span, when traces are exported: the task's spans are its children.
    const traceparent = RequestTraces.traceparent(data.requestId);
    if (traceparent) {
      data.traceparent = traceparent;
    }
    try {
      await this.queue.enqueue(
        {
          id: task.taskId,
          address: task.address,
          orgId: caller.orgId,
          apiKeyId: caller.apiKeyId,
          modelId: task.model,
          mode: task.mode,
          api: task.api,
          kind: data.kind === 'embed' ? 'embedding' : 'chat',
          stream,
          line: task.line,
          apiInstance: this.instance.id,
          deadline: taskDeadline(this.config, Date.now()),
          budgets: budgetScope(caller.budgets),
          traceId: traceIdOf(traceparent),
        },
        data,
        caller.weight,
      );
    } catch (error) {
      this.logger.error({ err: error, task: task.address, requestId: data.requestId }, 'enqueue failed');
      await flight.fail('failed', 'service_unavailable', 'The request could not be queued. Try again shortly.');
      throw new AppError(
        'service_unavailable',
        'The request could not be queued. Try again shortly.',
        null,
        taken.headers,
      );
    }
    return flight;
  }
}
