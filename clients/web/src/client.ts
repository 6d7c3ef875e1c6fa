// `createEngageClient`: one Apollo Client for an engage service, HTTP for queries and
// mutations, a `graphql-transport-ws` socket for subscriptions, both carrying the same
// bearer token.
import { ApolloClient, ApolloLink } from '@apollo/client';
import { CombinedGraphQLErrors } from '@apollo/client/errors';
import { SetContextLink } from '@apollo/client/link/context';
import { HttpLink } from '@apollo/client/link/http';
import { PersistedQueryLink } from '@apollo/client/link/persisted-queries';
import { getMainDefinition } from '@apollo/client/utilities';
import { createClient, type Client } from 'graphql-ws';
import { mergeMap, Observable, of, timer } from 'rxjs';
import { createEngageCache } from './cache';
import { retryAfterSeconds } from './errors';
import { documentText, sha256Hex, trustedHash } from './trusted';

/**
 * RATE_LIMITED answers waited out and retried, at most this many times per operation and
 * only when the wait asked for is this short; a longer one is the app's to show.
 */
const RATE_LIMITED_RETRIES = 2;
const RATE_LIMITED_LONGEST_WAIT_SECONDS = 5;

export interface EngageClientOptions {
  /** The GraphQL endpoint, e.g. `https://api.example.com/graphql`. */
  url: string;
  /** The WebSocket endpoint; default: `url` with `ws:`/`wss:`. */
  wsUrl?: string;
  /** The current token (without `Bearer `), or null when signed out. Read for every request
   * and for every (re)connection of the socket, so a refreshed token is picked up. */
  getToken: () => string | null | undefined | Promise<string | null | undefined>;
  /** Called when the socket connects or closes (for a "live" indicator). */
  onSocket?: (state: 'connected' | 'closed') => void;
}

export interface EngageClient {
  apollo: ApolloClient;
  /** Closes the socket and stops the client. */
  dispose(): void;
}

export function createEngageClient(options: EngageClientOptions): EngageClient {
  const socket = createClient({
    url: options.wsUrl ?? options.url.replace(/^http/, 'ws'),
    // A function, so that each reconnection sends the token of that moment.
    connectionParams: async () => {
      const token = await options.getToken();
      return token ? { Authorization: `Bearer ${token}` } : {};
    },
    // Keep reconnecting through a server restart or a deploy.
    retryAttempts: Infinity,
    shouldRetry: () => true,
    on: {
      connected: () => options.onSocket?.('connected'),
      closed: () => options.onSocket?.('closed'),
    },
  });

  const auth = new SetContextLink(async (context) => {
    const token = await options.getToken();
    return token ? { headers: { ...context.headers, Authorization: `Bearer ${token}` } } : {};
  });
  // Each operation goes by its hash; a server that does not hold it answers
  // PERSISTED_QUERY_NOT_FOUND and the link sends it again with its text, which the server
  // then stores (APQ). Listed documents use the manifest's hash, others a hash of their text.
  const persisted = new PersistedQueryLink({
    generateHash: (document) => trustedHash(document) ?? sha256Hex(documentText(document)),
  });
  const http = new HttpLink({ uri: options.url, print: documentText });

  const link = ApolloLink.split(
    ({ query }) => {
      const definition = getMainDefinition(query);
      return definition.kind === 'OperationDefinition' && definition.operation === 'subscription';
    },
    new TrustedWsLink(socket),
    ApolloLink.from([auth, new RateLimitedLink(), persisted, http]),
  );

  const apollo = new ApolloClient({ link, cache: createEngageCache() });
  return {
    apollo,
    dispose() {
      apollo.stop();
      void socket.dispose();
    },
  };
}

/**
 * Sends an operation again once a RATE_LIMITED answer's `retryAfter` has passed. engage
 * refuses a request over its rates before running any of it, so this is safe for mutations
 * too. A first visit to a server that lacks the app's documents meets it: storing a
 * document costs as much as a request of many writes. (Apollo's `RetryLink` retries
 * network errors only, and this answer is a GraphQL response.)
 */
class RateLimitedLink extends ApolloLink {
  override request(
    operation: ApolloLink.Operation,
    forward: ApolloLink.ForwardFunction,
  ): Observable<ApolloLink.Result> {
    const attempt = (retriesLeft: number): Observable<ApolloLink.Result> =>
      forward(operation).pipe(
        mergeMap((result) => {
          const wait = retriesLeft > 0 ? waitAsked(result) : undefined;
          return wait === undefined
            ? of(result)
            : timer(wait * 1000).pipe(mergeMap(() => attempt(retriesLeft - 1)));
        }),
      );
    return attempt(RATE_LIMITED_RETRIES);
  }
}

/** The seconds a RATE_LIMITED result asks to wait, when short enough to wait here. */
function waitAsked(result: ApolloLink.Result): number | undefined {
  if (!('errors' in result) || !result.errors) return undefined;
  const seconds = retryAfterSeconds(new CombinedGraphQLErrors(result));
  return seconds !== undefined && seconds <= RATE_LIMITED_LONGEST_WAIT_SECONDS ? seconds : undefined;
}

/**
 * Apollo's `GraphQLWsLink`, but sending a listed document's manifest text (its own printer
 * lays documents out otherwise, and a server running only trusted documents matches the
 * exact text).
 */
class TrustedWsLink extends ApolloLink {
  constructor(private readonly socket: Client) {
    super();
  }

  override request(operation: ApolloLink.Operation): Observable<ApolloLink.Result> {
    const { query, variables, operationName, extensions } = operation;
    return new Observable((observer) =>
      this.socket.subscribe(
        { query: documentText(query), variables, operationName, extensions },
        {
          next: (result) => observer.next(result as ApolloLink.Result),
          complete: () => observer.complete(),
          error: (error: unknown) => observer.error(socketError(error)),
        },
      ),
    );
  }
}

/** What graphql-ws reports, as the errors Apollo Client knows. */
function socketError(error: unknown): Error {
  if (error instanceof Error) return error;
  if (Array.isArray(error)) return new CombinedGraphQLErrors({ errors: error });
  if (error && typeof error === 'object' && 'code' in error) {
    const { code, reason } = error as { code: number; reason?: string };
    return new Error(`socket closed with ${code} ${reason ?? ''}`.trim());
  }
  return new Error('the socket failed');
}
