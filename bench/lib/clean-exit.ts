/**
 * Preloaded (`node --require`) into api and dispatcher when the bench profiles them. Nest's shutdown
 * hook ends by re-raising the signal with process.kill, and a process killed by a signal never writes
 * its --cpu-prof profile. This listener stays registered after Nest removes its own, takes that
 * re-raised signal and exits normally instead, so the profile is written.
 */
let received = 0;
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.on(signal, () => {
    received++;
    if (received > 1) {
      process.exit(0);
    }
  });
}
