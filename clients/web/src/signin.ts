// Daily sign-in: the mutation, and the calendar it changes.
import type { ApolloClient } from '@apollo/client';
import { SignInDocument } from './gql/graphql';

/**
 * Signs the viewer in for today. The answer carries the signed day's month and the streak,
 * which Apollo writes into the cached month and streak: what is on screen shows them at once.
 */
export async function signIn(apollo: ApolloClient) {
  const { data } = await apollo.mutate({ mutation: SignInDocument });
  return data?.signIn;
}
