import { Injectable } from '@nestjs/common';
import { PrismaService } from '@app/common';
import type { FinishReason, Usage } from '@app/common';

export type ClaimResult = { claimed: true; attempts: number } | { claimed: false; status: string | null };

/**
 * The dispatcher's writes to task rows. Every transition is a conditional update on the status it
 * expects, so that a cancel, a timeout or another dispatcher racing with us cannot be overwritten.
 */
@Injectable()
export class TaskRecordsService {
  constructor(private readonly prisma: PrismaService) {}

  /**
   * Claims a task for a device: from `queued`, or from `assigned` with no output yet (its previous
   * device or dispatcher is gone and the job came back through the stalled check).
   */
  async claim(taskId: string, deviceId: string): Promise<ClaimResult> {
    const rows = await this.prisma.client.$queryRaw<{ attempts: number }[]>`
      UPDATE tasks SET status = 'assigned', device_id = ${deviceId}::uuid, assigned_at = now(), attempts = attempts + 1
      WHERE id = ${taskId}::uuid AND (status = 'queued' OR (status = 'assigned' AND first_token_at IS NULL))
      RETURNING attempts`;
    if (rows.length === 1) {
      return { claimed: true, attempts: rows[0].attempts };
    }
    const task = await this.prisma.client.task.findUnique({ where: { id: taskId }, select: { status: true } });
    return { claimed: false, status: task?.status ?? null };
  }

  /** The first output reached the api: from now on the task can no longer be retried elsewhere. */
  async markStreaming(taskId: string, at: Date): Promise<void> {
    await this.prisma.client.task.updateMany({
      where: { id: taskId, status: 'assigned' },
      data: { status: 'streaming', firstTokenAt: at },
    });
  }

  /** Back to the queue after the device dropped before any output. */
  async requeue(taskId: string, deviceId: string): Promise<boolean> {
    const { count } = await this.prisma.client.task.updateMany({
      where: { id: taskId, deviceId, status: 'assigned', firstTokenAt: null },
      data: { status: 'queued', deviceId: null, assignedAt: null },
    });
    return count === 1;
  }

  /** Records a finished task; false when something else (a timeout, a cancel) ended it first. */
  async complete(
    taskId: string,
    result: { finishReason: FinishReason; usage: Usage | null; outputSha256: string; firstTokenAt: Date | null },
  ): Promise<boolean> {
    const { count } = await this.prisma.client.task.updateMany({
      where: { id: taskId, status: { in: ['assigned', 'streaming'] } },
      data: {
        status: 'completed',
        finishReason: result.finishReason,
        promptTokens: result.usage?.prompt_tokens ?? null,
        completionTokens: result.usage?.completion_tokens ?? null,
        outputSha256: result.outputSha256,
        firstTokenAt: result.firstTokenAt ?? undefined,
        finishedAt: new Date(),
      },
    });
    return count === 1;
  }

  /**
   * A task the client abandoned: the api may have marked it cancelled already; this makes sure it is,
   * and records the SHA-256 of what had been relayed.
   */
  async cancelled(taskId: string, outputSha256: string | null): Promise<void> {
    // One statement, so that nobody sees the task cancelled without its error code and end time.
    await this.prisma.client.$executeRaw`
      UPDATE tasks SET status = 'cancelled',
        error_code = COALESCE(error_code, 'client_disconnected'),
        finished_at = COALESCE(finished_at, now()),
        output_sha256 = COALESCE(${outputSha256}, output_sha256)
      WHERE id = ${taskId}::uuid AND status IN ('queued', 'assigned', 'streaming', 'cancelled')`;
  }

  /**
   * Ends tasks nobody can end any more because the api instance that held their client died:
   * queued past the queue timeout, or unfinished past the longest a request may last. The api
   * normally ends them itself well before; the margin keeps this from racing it.
   */
  async reapOrphans(queueTimeoutMs: number, maxStreamMs: number, marginMs: number): Promise<number> {
    const queued = await this.prisma.client.task.updateMany({
      where: { status: 'queued', queuedAt: { lt: new Date(Date.now() - queueTimeoutMs - marginMs) } },
      data: { status: 'timed_out', errorCode: 'queue_timeout', finishedAt: new Date() },
    });
    const running = await this.prisma.client.task.updateMany({
      where: {
        status: { in: ['assigned', 'streaming'] },
        queuedAt: { lt: new Date(Date.now() - maxStreamMs - marginMs) },
      },
      data: { status: 'timed_out', errorCode: 'stream_timeout', finishedAt: new Date() },
    });
    return queued.count + running.count;
  }

  /** Ends a task that is not yet terminal with an error status; returns whether this call ended it. */
  async end(
    taskId: string,
    status: 'failed' | 'cancelled' | 'timed_out',
    errorCode: string,
    output: { sha256: string; firstTokenAt: Date } | null = null,
  ): Promise<boolean> {
    // With output, also the first-token time: its own write (markStreaming) is not awaited.
    const { count } = await this.prisma.client.task.updateMany({
      where: { id: taskId, status: { in: ['queued', 'assigned', 'streaming'] } },
      data: {
        status,
        errorCode,
        finishedAt: new Date(),
        ...(output ? { outputSha256: output.sha256, firstTokenAt: output.firstTokenAt } : {}),
      },
    });
    return count === 1;
  }
}
