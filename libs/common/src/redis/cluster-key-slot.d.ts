// cluster-key-slot (ioredis's own slot calculator) ships no types.
declare module 'cluster-key-slot' {
  /** The Redis Cluster hash slot of a key, its hash tag (`{…}`) honoured. */
  function calculateSlot(key: string | Buffer): number;
  export default calculateSlot;
}
