import { upstreamErrorSuite } from './support/upstream-errors';

upstreamErrorSuite('ollama');
