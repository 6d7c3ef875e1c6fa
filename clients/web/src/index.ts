// engage's web client kit: a configured Apollo Client, typed operations (generated from
// schema.graphql and src/operations.graphql), typed error codes, and the few helpers that
// keep the cache in step with mutations and live events.
export { createEngageClient, type EngageClient, type EngageClientOptions } from './client';
export { createEngageCache } from './cache';
export { errorCode, ErrorCode } from './errors';
export { followLikeCounts, refreshRemark, setLiked } from './remarks';
export { signIn } from './signin';
export * from './gql/graphql';
