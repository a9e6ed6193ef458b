/* Per-process stats file: placeholder until the control plane lands. */
#include "internal.h"

void publish_update(void) {}
void publish_exit(void) {}
