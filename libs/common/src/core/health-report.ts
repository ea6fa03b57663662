import { Injectable } from '@nestjs/common';

/**
 * What `GET /healthz` answers: `{"status":"ok"}` and the readings parts of the process add at start
 * (the dispatcher: how many devices it holds). The core knows nothing of them.
 */
@Injectable()
export class HealthReport {
  private readonly readings = new Map<string, () => unknown>();

  /** Adds `name` to every answer, read when the answer is made. */
  add(name: string, read: () => unknown): void {
    this.readings.set(name, read);
  }

  body(): Record<string, unknown> {
    const body: Record<string, unknown> = { status: 'ok' };
    for (const [name, read] of this.readings) {
      body[name] = read();
    }
    return body;
  }
}
