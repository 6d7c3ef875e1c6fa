// Likes: the like button's mutations, the live counts and the refresh of one remark, all
// landing in the cached `Remark`, so that every view of a remark shows the same count.
import type { ApolloClient } from '@apollo/client';
import type { Subscription } from 'rxjs';
import {
  LikeCountChangedDocument,
  LikeRemarkDocument,
  RemarkByIdDocument,
  UnlikeRemarkDocument,
} from './gql/graphql';

/**
 * Likes (or, with `like: false`, unlikes) a remark as the viewer. The answer carries the
 * remark with its new count and `likedByMe`, which Apollo writes into the cached remark.
 */
export async function setLiked(apollo: ApolloClient, remarkId: string, like: boolean) {
  const variables = { remarkId };
  if (like) {
    const { data } = await apollo.mutate({ mutation: LikeRemarkDocument, variables });
    return data?.likeRemark;
  }
  const { data } = await apollo.mutate({ mutation: UnlikeRemarkDocument, variables });
  return data?.unlikeRemark;
}

/**
 * Reads one remark again from the service (`node(id)`), into the cached remark: what the
 * live counts do not carry, such as `likedByMe` after a like from another device. Null when
 * the remark is gone.
 */
export async function refreshRemark(apollo: ApolloClient, remarkId: string) {
  const { data } = await apollo.query({
    query: RemarkByIdDocument,
    variables: { id: remarkId },
    fetchPolicy: 'network-only',
  });
  const node = data?.node;
  return node?.__typename === 'Remark' ? node : null;
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
