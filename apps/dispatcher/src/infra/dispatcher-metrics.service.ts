import { Injectable } from '@nestjs/common';
import { Counter, Gauge, Histogram } from 'prom-client';
import type { Registry } from 'prom-client';
import { LATENCY_BUCKETS, createRegistry } from '@app/common';

/**
 * The dispatcher's metrics (docs/operations.md says what each means). Labels take only catalog model
 * ids and codes from fixed sets, never what a device or client chose.
 */
@Injectable()
export class DispatcherMetrics {
  readonly registry: Registry = createRegistry('dispatcher');

  readonly tasks = new Counter({
    name: 'switchyard_dispatcher_tasks_total',
    help: 'Tasks this dispatcher ended, by outcome (completed, or the error code)',
    labelNames: ['outcome'],
    registers: [this.registry],
  });

  readonly assignments = new Counter({
    name: 'switchyard_assignments_total',
    help: 'Assignments to devices, by result (accepted, refused, requeued)',
    labelNames: ['result'],
    registers: [this.registry],
  });

  readonly invalidEvents = new Counter({
    name: 'switchyard_device_invalid_events_total',
    help: 'Events from devices rejected, by reason (docs/operations.md lists them): each is a strike',
    labelNames: ['reason'],
    registers: [this.registry],
  });

  readonly clampedUsage = new Counter({
    name: 'switchyard_device_usage_clamped_total',
    help: 'Token counts reported by devices that exceeded what the request allowed, and were clamped',
    registers: [this.registry],
  });

  readonly quarantined = new Counter({
    name: 'switchyard_device_quarantined_total',
    help: 'Network devices this dispatcher quarantined, by cause (usage: its usage reports kept claiming tokens nobody received; canary: it answered a canary otherwise than registered)',
    labelNames: ['cause'],
    registers: [this.registry],
  });

  readonly canaries = new Counter({
    name: 'switchyard_canaries_total',
    help: 'Canary prompts this dispatcher sent, by result: passed, failed (answered otherwise than registered), inconclusive (no answer: an error, a refusal, a disconnect, silence)',
    labelNames: ['result'],
    registers: [this.registry],
  });

  readonly assignLatency = new Histogram({
    name: 'switchyard_assign_seconds',
    help: 'From a job being announced (or a device freed) to its assignment being sent to a device',
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });

  readonly takeovers = new Counter({
    name: 'switchyard_takeover_tasks_total',
    help: 'Tasks of dead dispatchers taken over by a survivor, by what became of them',
    labelNames: ['result'],
    registers: [this.registry],
  });

  readonly resumes = new Counter({
    name: 'switchyard_resumes_total',
    help: 'Tasks whose device was lost after output reached the client, by cause and by what became of them (resumed on another device, or ended because they could not be)',
    labelNames: ['cause', 'outcome'],
    registers: [this.registry],
  });

  /** A gauge whose value the owner of the data computes at each scrape. */
  gauge(name: string, help: string, labelNames: string[], collect: (gauge: Gauge) => void | Promise<void>): void {
    new Gauge({
      name,
      help,
      labelNames,
      registers: [this.registry],
      collect() {
        return collect(this);
      },
    });
  }
}
