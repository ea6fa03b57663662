/**
 * Preloaded (`node --expose-gc --require`) into the api and dispatcher the bench starts: SIGUSR2 runs
 * a full garbage collection, so that memory is read with the garbage of what came before collected,
 * not at whatever point of its GC cycle the process happens to be. Nothing else changes.
 */
const collect = (globalThis as { gc?: () => void }).gc;
if (collect) {
  process.on('SIGUSR2', () => collect());
}
