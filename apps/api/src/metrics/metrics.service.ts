import { Injectable } from '@nestjs/common';
import { Counter, Histogram } from 'prom-client';
import type { Registry } from 'prom-client';
import { LATENCY_BUCKETS, TOKENS_PER_SECOND_BUCKETS, createRegistry } from '@app/common';

/** The api's metrics (docs/operations.md says what each means). */
@Injectable()
export class MetricsService {
  readonly registry: Registry = createRegistry('api');

  readonly httpRequests = new Counter({
    name: 'switchyard_http_requests_total',
    help: 'HTTP requests answered, by route pattern, method and status',
    labelNames: ['route', 'method', 'status'],
    registers: [this.registry],
  });

  readonly rateLimitRejections = new Counter({
    name: 'switchyard_rate_limit_rejections_total',
    help: 'Requests refused with 429, by limit (rpm, concurrency, queued, auth_failures, org_budget, key_budget)',
    labelNames: ['kind'],
    registers: [this.registry],
  });

  readonly queueWait = new Histogram({
    name: 'switchyard_queue_wait_seconds',
    help: 'Time from enqueue to a device accepting the task',
    labelNames: ['model'],
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });

  readonly timeToFirstToken = new Histogram({
    name: 'switchyard_time_to_first_token_seconds',
    help: 'Time from the request reaching the api to the first output reaching it',
    labelNames: ['model', 'api'],
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });

  readonly tokensPerSecond = new Histogram({
    name: 'switchyard_tokens_per_second',
    help: 'Completion tokens per second of generation (first output to end), as devices report tokens',
    labelNames: ['model'],
    buckets: TOKENS_PER_SECOND_BUCKETS,
    registers: [this.registry],
  });

  readonly tasks = new Counter({
    name: 'switchyard_tasks_total',
    help: 'Tasks ended, by outcome (completed, or the error code) and api',
    labelNames: ['outcome', 'api'],
    registers: [this.registry],
  });
}
