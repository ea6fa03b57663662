import type { Feature } from '@app/common/protocol/chat';
import type { ModelIdentity } from '@app/common/protocol/messages';
import type { Backend, BackendResult, BackendTask, DeltaSink, EmbedResult, EmbedTask } from '../backend';
import type { UpstreamMonitor } from './upstream-monitor';

/**
 * What the backends of a runtime over HTTP (Ollama, OpenAI-compatible) share: their models,
 * features and health come from an {@link UpstreamMonitor} that each builds with its own probe.
 */
export abstract class UpstreamBackend implements Backend {
  abstract readonly name: string;
  protected abstract readonly monitor: UpstreamMonitor;

  get features(): Feature[] {
    return this.monitor.features();
  }

  models(): string[] {
    return this.monitor.models();
  }

  identities(): ModelIdentity[] {
    return this.monitor.identities();
  }

  available(): boolean {
    return this.monitor.available();
  }

  start(onChange: () => void): Promise<void> {
    return this.monitor.start(onChange);
  }

  stop(): void {
    this.monitor.stop();
  }

  abstract run(task: BackendTask, sink: DeltaSink, signal: AbortSignal): Promise<BackendResult>;

  abstract embed(task: EmbedTask, signal: AbortSignal): Promise<EmbedResult>;
}
