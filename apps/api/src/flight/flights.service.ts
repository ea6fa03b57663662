import { Inject, Injectable } from '@nestjs/common';
import type { OnApplicationShutdown } from '@nestjs/common';
import { APP_CONFIG, LOGGER, TaskRepository, REDIS, KeySpace } from '@app/common';
import type { AppConfig, EndGuard, Ending, Logger, RedisClient } from '@app/common';
import { JobQueue } from '../queue/job-queue.service';
import type { Slot } from '../limits/limits.service';
import { MetricsService } from '../metrics/metrics.service';
import { FLIGHT_RESUME_GRACE_MS, Flight } from './flight';
import type { FlightHooks, FlightState, FlightTask } from './flight';
import { TaskStreamReader } from './task-stream.reader';
import type { StreamSubscription } from './task-stream.reader';

/** How long the dispatcher has to end a cancelled task before the api ends it itself (it died). */
const CANCEL_FALLBACK_MS = 5_000;

/** What a flight holds of its org's limits until the state that frees it. */
interface Holdings {
  concurrency: Slot;
  queued: Slot;
  stream: StreamSubscription;
}

/**
 * The flights of this api instance: each follows its task's stream from the moment it is created,
 * and its side effects happen here, once: limit slots released, the job withdrawn or the device
 * stopped, the task ended through the repository, metrics. Shutdown drains them.
 */
@Injectable()
export class FlightsService implements FlightHooks, OnApplicationShutdown {
  private readonly flights = new Map<Flight, Holdings>();
  private readonly fallbacks = new Set<NodeJS.Timeout>();
  private draining = false;

  constructor(
    private readonly reader: TaskStreamReader,
    private readonly tasks: TaskRepository,
    private readonly queue: JobQueue,
    private readonly metrics: MetricsService,
    @Inject(REDIS) private readonly redis: RedisClient,
    @Inject(APP_CONFIG) private readonly config: AppConfig,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {}

  get isDraining(): boolean {
    return this.draining;
  }

  get inFlight(): number {
    return this.flights.size;
  }

  /** A flight for a task about to be enqueued; its stream is followed from now on. */
  open(task: FlightTask, slots: { concurrency: Slot; queued: Slot }): Flight {
    const flight = new Flight(
      task,
      {
        queueMs: this.config.QUEUE_TIMEOUT_MS,
        idleMs: this.config.TASK_IDLE_TIMEOUT_MS + (task.resume ? FLIGHT_RESUME_GRACE_MS : 0),
        streamMs: this.config.MAX_STREAM_MS,
      },
      this,
    );
    const stream = this.reader.subscribe(task.taskId, (entry) => flight.onEntry(entry));
    this.flights.set(flight, { ...slots, stream });
    return flight;
  }

  async endTask(flight: Flight, ending: Ending, guard: EndGuard): Promise<boolean> {
    try {
      return (await this.tasks.end(flight.task.taskId, ending, guard)).ok;
    } catch (err) {
      // Redis is unreachable: the client still gets its error; the reaper ends the task later.
      this.logger.error({ err, task: flight.task.address, code: ending.errorCode }, 'could not end a task');
      return true;
    }
  }

  async withdraw(flight: Flight, waiting: boolean): Promise<void> {
    if (!waiting && flight.abandoned) {
      // The dispatcher holding it stops its device and records the cancellation; should none (it
      // died), the api ends the task after a grace period.
      const fallback = setTimeout(() => {
        this.fallbacks.delete(fallback);
        void this.endTask(flight, { status: 'cancelled', errorCode: 'client_disconnected' }, 'any');
      }, CANCEL_FALLBACK_MS);
      fallback.unref();
      this.fallbacks.add(fallback);
    }
    try {
      if (waiting) {
        await this.queue.remove(flight.task.line, flight.task.taskId);
      } else {
        await this.queue.cancel(flight.task.taskId);
      }
    } catch (err) {
      // The job then waits out its task (the dispatcher finds it ended); the reaper catches the rest.
      this.logger.warn({ err: (err as Error).message, task: flight.task.address }, 'could not withdraw the task');
    }
  }

  changed(flight: Flight, from: FlightState, outcome: string | null): void {
    const holdings = this.flights.get(flight);
    if (!holdings) {
      return;
    }
    const now = performance.now();
    if (from === 'queued' && flight.state !== 'queued') {
      holdings.queued.release();
      this.metrics.queueWait.observe({ model: flight.task.model }, (now - flight.queuedAt) / 1000);
    }
    if (flight.state === 'streaming' && from !== 'streaming' && flight.firstOutputAt !== null) {
      this.metrics.timeToFirstToken.observe(
        { model: flight.task.model, api: flight.task.api },
        (flight.firstOutputAt - flight.startedAt) / 1000,
      );
    }
    if (outcome !== null) {
      this.flights.delete(flight);
      holdings.queued.release();
      holdings.concurrency.release();
      holdings.stream.close();
      this.metrics.tasks.inc({ outcome, api: flight.task.api });
      const seconds = flight.firstOutputAt === null ? 0 : (now - flight.firstOutputAt) / 1000;
      if (outcome === 'completed' && flight.completionTokens && seconds > 0) {
        this.metrics.tokensPerSecond.observe({ model: flight.task.model }, flight.completionTokens / seconds);
      }
      this.redis.unlink(KeySpace.of(this.redis).taskStream(flight.task.taskId)).catch((err: unknown) =>
        // It expires on its own (TASK_STREAM_TTL_S).
        this.logger.warn({ err: (err as Error).message }, 'could not delete a task stream'),
      );
    }
  }

  flow(flight: Flight, reading: boolean): void {
    const stream = this.flights.get(flight)?.stream;
    if (reading) {
      stream?.resume();
    } else {
      stream?.pause();
    }
  }

  /**
   * Shutdown: refuse new requests, give the ones in flight SHUTDOWN_GRACE_MS to finish, then end the
   * rest with an explicit error (their clients get it; their devices are told to stop).
   */
  async drain(): Promise<void> {
    this.draining = true;
    const deadline = Date.now() + this.config.SHUTDOWN_GRACE_MS;
    while (this.flights.size > 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
    }
    await Promise.all(
      [...this.flights.keys()].map((flight) =>
        flight.fail('failed', 'server_shutdown', 'The server shut down before the answer was complete.'),
      ),
    );
  }

  /** The process is going: no timer of a flight may fire on closed connections. */
  onApplicationShutdown(): void {
    for (const [flight, holdings] of this.flights) {
      flight.stopTimers();
      holdings.stream.close();
    }
    this.flights.clear();
    this.fallbacks.forEach(clearTimeout);
    this.fallbacks.clear();
  }
}
