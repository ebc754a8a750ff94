; Definitions
(class_declaration
  name: (identifier) @name.definition.class) @definition.class

(record_declaration
  name: (identifier) @name.definition.class) @definition.class

(interface_declaration
  name: (identifier) @name.definition.interface) @definition.interface

(annotation_type_declaration
  name: (identifier) @name.definition.interface) @definition.interface

(enum_declaration
  name: (identifier) @name.definition.enum) @definition.enum

(method_declaration
  name: (identifier) @name.definition.method) @definition.method

(constructor_declaration
  name: (identifier) @name.definition.constructor) @definition.constructor

(field_declaration
  declarator: (variable_declarator
    name: (identifier) @name.definition.field)) @definition.field

(constant_declaration
  declarator: (variable_declarator
    name: (identifier) @name.definition.constant)) @definition.constant

(enum_constant
  name: (identifier) @name.definition.constant) @definition.constant

; References
(method_invocation
  name: (identifier) @name.reference.call)

(object_creation_expression
  type: (type_identifier) @name.reference.class)

(type_identifier) @name.reference.type

(import_declaration
  (scoped_identifier
    name: (identifier) @name.reference.import))

(marker_annotation
  name: (identifier) @name.reference.annotation)

(annotation
  name: (identifier) @name.reference.annotation)
