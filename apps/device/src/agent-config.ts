import type { ManagerOptions, SocketOptions } from 'socket.io-client';
import type { Logger } from '@app/common/logging/logger';
import type { Backend } from './backends/backend';

export interface AgentConfig {
  /**
   * Dispatcher base URLs (origins), e.g. http://127.0.0.1:8081: the agent is connected to one of them
   * at a time and moves to the next within a second when it goes away.
   */
  servers: string[];
  token: string;
  backend: Backend;
  logger: Logger;
  /** Whether the per-task log line may carry the prompt and the completion. */
  logContent: boolean;
  /** Called once when the agent has stopped for good: 0 after a shutdown, 1 when the token was refused. */
  onExit(code: number): void;
  /** Overrides of the socket.io client options (tests shorten the reconnection delays). */
  socketOptions?: Partial<ManagerOptions & SocketOptions>;
}
