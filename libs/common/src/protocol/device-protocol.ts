/**
 * The device protocol, socket.io namespace `/devices`, in one place for the dispatcher and the agent
 * (docs/protocol.md describes it): the connection and its handshake (connection.ts), the messages
 * (messages.ts), the catalog of events per direction from which the typed event maps, the event names
 * and the handler tables derive (catalog.ts, over message-catalog.ts), and the versions a dispatcher
 * serves (versions.ts, version-2.ts).
 */
export * from './connection';
export * from './messages';
export * from './embeddings';
export * from './message-catalog';
export * from './catalog';
export * from './versions';
export * from './version-2';
