/** A Postgres or Redis server that the demo or the test run started for itself. */
export interface EmbeddedService {
  /** Its URL without a database (Postgres) or database number (Redis). */
  url: string;
  /** One line for the operator: what it is and where. */
  description: string;
  /** Stops it and waits for its process to end. */
  stop(): Promise<void>;
}
