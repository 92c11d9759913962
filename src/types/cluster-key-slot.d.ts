// cluster-key-slot ships no types: the slot (0-16383) Redis Cluster assigns a key, hash tag included.
declare module 'cluster-key-slot' {
  function calculateSlot(key: string | Buffer): number;
  export = calculateSlot;
}
