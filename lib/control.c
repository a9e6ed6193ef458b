/* Control directory: placeholder until the control plane lands. */
#include "internal.h"

void control_init(void) {}
void control_poll(void) {}
void control_child_after_fork(void) {}
void hp_control_reload(void) { hp_init(); control_poll(); }
