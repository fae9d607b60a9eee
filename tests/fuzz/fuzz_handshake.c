/*
 * libFuzzer target: the handshake's proof check (HELLO_ACK and AUTH), the
 * part of HELLO handling a stranger reaches before it is anyone. The
 * input is a selector byte then a frame; a HELLO_ACK or AUTH frame's proof
 * is checked, by a node holding the cluster secret, against the
 * transcript fz_hs_transcript gives.
 *
 * Besides ASan and UBSan it checks that the check is exactly right: OK if
 * and only if the frame carries a mac equal to the one troupe__auth_prove
 * makes for that transcript with that secret (what the real peer would
 * send), EAUTH with a reason otherwise; and that a node without a secret
 * or certificates (open mode) accepts any proof.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_handshake.h"
#include "fuzz_support.h"

static troupe__auth *secret, *open_mode;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    troupe__auth_cfg c = {.node_id = FZ_HS_SELF,
                          .secret = FZ_HS_SECRET,
                          .secret_len = strlen(FZ_HS_SECRET)};
    troupe__auth_cfg o = {.node_id = FZ_HS_SELF};
    if (troupe__auth_create(&c, &secret) != TROUPE_OK ||
        troupe__auth_create(&o, &open_mode) != TROUPE_OK)
        abort();
    return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    troupe_frame_hdr h;
    troupe_err e =
        troupe_wire_decode_frame(NULL, data + 1, size - 1, &h, NULL, NULL);
    if (e != TROUPE_OK ||
        (h.type != TROUPE_FRAME_HELLO_ACK && h.type != TROUPE_FRAME_AUTH))
        return 0;
    troupe__transcript t = fz_hs_transcript(&h, data[0]);
    const char *why = NULL;
    e = troupe__auth_check(secret, &t, h.sender, &h.proof, &why);
    FZ_ERR_IN(e, TROUPE_OK, TROUPE_EAUTH);
    FZ_CHECK(why != NULL && (e == TROUPE_OK || why[0] != '\0'),
             "EAUTH without a reason");

    /* what the real peer, holding the secret, would have sent */
    troupe__proof real;
    FZ_CHECK(troupe__auth_prove(secret, &t, &real) == TROUPE_OK, "prove");
    bool same = h.proof.mac != NULL && h.proof.mac_len == TROUPE_WIRE_MAC_LEN &&
                memcmp(h.proof.mac, real.mac, TROUPE_WIRE_MAC_LEN) == 0;
    FZ_CHECK((e == TROUPE_OK) == same, "check %s but the mac %s the real one",
             troupe_err_name(e), same ? "is" : "is not");

    FZ_CHECK(troupe__auth_check(open_mode, &t, h.sender, &h.proof, &why) ==
                 TROUPE_OK,
             "open mode refused a proof");
    return 0;
}
