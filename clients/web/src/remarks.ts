// Likes: the like button's mutations and the live counts, both landing in the cached
// `Remark`, so that every view of a remark shows the same count.
import type { ApolloClient, ApolloCache } from '@apollo/client';
import type { Subscription } from 'rxjs';
import {
  LikeCountChangedDocument,
  LikeRemarkDocument,
  UnlikeRemarkDocument,
  type LikeRemarkMutation,
} from './gql/graphql';

/**
 * Likes (or, with `like: false`, unlikes) a remark as the viewer; the cached remark takes
 * the answer's count and state.
 */
export async function setLiked(apollo: ApolloClient, remarkId: string, like: boolean) {
  const variables = { remarkId };
  if (like) {
    const { data } = await apollo.mutate({
      mutation: LikeRemarkDocument,
      variables,
      update: (cache, { data }) => writeLike(cache, data?.likeRemark),
    });
    return data?.likeRemark;
  }
  const { data } = await apollo.mutate({
    mutation: UnlikeRemarkDocument,
    variables,
    update: (cache, { data }) => writeLike(cache, data?.unlikeRemark),
  });
  return data?.unlikeRemark;
}

/**
 * NEXT SCHEMA: this goes, with the `update` options above, once the operations select
 * `likeRemark { remark { id likeCount likedByMe } }`: Apollo normalises that into the
 * cached remark itself. Until then the answer names the remark by id only, so it is
 * written into the cached remark here.
 */
function writeLike(cache: ApolloCache, answer: LikeRemarkMutation['likeRemark'] | undefined) {
  if (!answer) return;
  cache.modify({
    id: cache.identify({ __typename: 'Remark', id: answer.remarkId }),
    fields: { likeCount: () => answer.likeCount, likedByMe: () => answer.liked },
  });
}

/**
 * Follows the like counts of these remarks (the current counts first, then each change)
 * into the cached remarks, until unsubscribed.
 */
export function followLikeCounts(apollo: ApolloClient, remarkIds: string[]): Subscription {
  return apollo
    .subscribe({ query: LikeCountChangedDocument, variables: { remarkIds }, fetchPolicy: 'no-cache' })
    .subscribe(({ data }) => {
      const event = data?.likeCountChanged;
      if (!event) return;
      apollo.cache.modify({
        id: apollo.cache.identify({ __typename: 'Remark', id: event.remarkId }),
        fields: { likeCount: () => event.likeCount },
      });
    });
}
